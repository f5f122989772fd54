"""SlopCodeBench's image build through the Docker SDK (reference §1.6):
images.build(fileobj=TAR, custom_context=True, tag=…, rm=True) against
DOCKER_HOST, the image run as 1000:1000 (the files it copied are
1000's), then the same build again: every step from the cache. Prints OK
lines; any failure raises."""
import io
import sys
import tarfile

import docker

base, tag = sys.argv[1], sys.argv[2]
client = docker.from_env()

DOCKERFILE = f"""FROM {base}
RUN mkdir -p /app
COPY --chown=1000:1000 submission /submission
ENV APP=1
WORKDIR /app
RUN cp -r /submission/. /app/ && echo ok > /app/ran
RUN chown -R 1000:1000 /app
USER 1000:1000
"""


def context():
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, body in [("Dockerfile", DOCKERFILE), ("submission/main.py", "print('hi')\n"),
                           ("submission/pkg/util.py", "x = 1\n")]:
            data = body.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    buf.seek(0)
    return buf


def build():
    image, logs = client.images.build(fileobj=context(), custom_context=True, tag=tag, rm=True)
    text = "".join(chunk.get("stream", "") for chunk in logs)
    return image, text


image, text = build()
assert f"Successfully tagged {tag}" in text, text
assert any(t.endswith(f"{tag}:latest") for t in image.tags), image.tags
print("OK build", image.id)

out = client.containers.run(tag, "sh -c 'id -u; pwd; stat -c \"%u:%g %n\" /submission/main.py /app/main.py /app/ran'",
                            user="1000:1000", remove=True).decode()
for want in ["1000\n/app\n", "1000:1000 /submission/main.py", "1000:1000 /app/main.py", "1000:1000 /app/ran"]:
    assert want in out, (want, out)
print("OK run")

again, text = build()
assert "Running in" not in text and text.count("Using cache") == 7, text
print("OK cache")
