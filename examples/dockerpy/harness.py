"""A harness written against the Docker SDK for Python (docker-py), run
against `slopbox serve`:

    slopbox serve &                                  # prints the DOCKER_HOST line
    export DOCKER_HOST=unix://$XDG_RUNTIME_DIR/slopbox.sock # or the line serve printed
    python3 examples/dockerpy/harness.py IMAGE WORKSPACE

It pulls IMAGE, starts a container over WORKSPACE, runs commands in it
(exit codes, output, environment), copies a file in and out, reads its
logs and removes it. Nothing here is slopbox-specific."""
import io
import sys
import tarfile

import docker

image, workspace = sys.argv[1], sys.argv[2]
client = docker.from_env()
print("engine API", client.version()["ApiVersion"])

client.images.pull(image)
c = client.containers.run(
    image,
    command=["sh", "-c", "echo started; sleep infinity"],
    detach=True,
    environment={"TASK": "demo"},
    volumes={workspace: {"bind": "/workspace", "mode": "rw"}},
    working_dir="/workspace",
    network_mode="none",
)
try:
    code, out = c.exec_run(["sh", "-c", "echo $TASK > result.txt; cat result.txt"])
    print("exec:", code, out.decode().strip())
    code, _ = c.exec_run(["sh", "-c", "exit 3"])
    print("exit code:", code)

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        data = b"print('hello from a copied file')\n"
        info = tarfile.TarInfo("hello.py")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    c.put_archive("/tmp", buf.getvalue())
    stream, _ = c.get_archive("/tmp/hello.py")
    with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as tar:
        print("copied back:", tar.extractfile("hello.py").read().decode().strip())

    print("logs:", c.logs().decode().strip())
finally:
    c.remove(force=True)
print("removed")
