"""The Docker SDK calls SlopCodeBench makes (reference §1.6), against
DOCKER_HOST, plus images.pull, containers.run(remove=True) and its
exit-code error, api.exec_start(stream=True) with exec_inspect's Running
during and after it, and images.get(ref).save(). Prints OK lines; any
failure raises."""
import io
import os
import sys
import tarfile
import time
import urllib.request

import docker

image, workspace, host_port = sys.argv[1], sys.argv[2], int(sys.argv[3])

client = docker.from_env()
assert client.ping() is True
print("OK version", client.version()["ApiVersion"])

client.images.pull(image)
print("OK pull")

c = client.containers.create(
    image,
    command="sleep infinity",
    tty=False,
    detach=True,
    stdin_open=False,
    environment={"K": "V", "HARNESS": "slopcodebench"},
    volumes={workspace: {"bind": "/workspace", "mode": "rw"}},
    user="0:0",
    network_mode="none",
    working_dir="/workspace",
    ports={},
)
c.start()
c.reload()
assert c.status == "running", c.status
print("OK running", c.name)

code, (out, err) = c.exec_run(["/bin/sh", "-c", "echo $K; pwd; echo oops >&2; echo hi > /workspace/from_container; exit 4"], demux=True)
assert code == 4, code
assert out == b"V\n/workspace\n", out
assert err == b"oops\n", err
assert open(os.path.join(workspace, "from_container")).read() == "hi\n"
print("OK exec_run demux")

# A command quicker than the client reads the response head: its output
# must not be lost in http.client's buffer (docker-py reads the raw socket).
for i in range(50):
    code, (out, err) = c.exec_run(["echo", str(i)], demux=True)
    assert (code, out, err) == (0, b"%d\n" % i, None), (i, code, out, err)
print("OK exec_run quick")

code, out = c.exec_run("cat /workspace/from_container")
assert code == 0 and out == b"hi\n", (code, out)
print("OK exec_run")

eid = client.api.exec_create(c.id, ["sh", "-c", "for i in 1 2 3; do echo $i; done"])["Id"]
chunks = b"".join(client.api.exec_start(eid, stream=True))
assert chunks == b"1\n2\n3\n", chunks
assert client.api.exec_inspect(eid)["ExitCode"] == 0
print("OK exec_start stream")

# exec_inspect's Running: true while a streamed exec runs (it waits for a
# file only made after the check), false after, with its ExitCode.
eid = client.api.exec_create(c.id, ["sh", "-c", "echo ready; until [ -e /tmp/go ]; do sleep 0.05; done; echo done"])["Id"]
assert client.api.exec_inspect(eid)["Running"] is False
stream = client.api.exec_start(eid, stream=True)
assert next(stream) == b"ready\n"
info = client.api.exec_inspect(eid)
assert info["Running"] is True and info["ExitCode"] is None, info
c.exec_run(["touch", "/tmp/go"])
assert b"".join(stream) == b"done\n"
deadline = time.monotonic() + 60
while client.api.exec_inspect(eid)["Running"] and time.monotonic() < deadline:
    time.sleep(0.05)
info = client.api.exec_inspect(eid)
assert info["Running"] is False and info["ExitCode"] == 0, info
print("OK exec_inspect Running")

c.stop(timeout=1)
c.reload()
assert c.status == "exited", c.status
print("OK stop")
c.remove(force=True)
try:
    client.containers.get(c.id)
    raise AssertionError("removed container still there")
except docker.errors.NotFound:
    pass
print("OK remove")

c2 = client.containers.create(image, command="sleep infinity", detach=True)
c2.start()
c2.kill()
c2.remove(force=True)
print("OK kill")

# SlopCodeBench's bridge mode with a published port (docker-py's ports=
# maps container port to host port); the server binds the loopback inside.
c3 = client.containers.create(
    image,
    command=["sh", "-c", "mkdir /w && echo served > /w/i && httpd -f -p 127.0.0.1:8000 -h /w"],
    detach=True,
    network_mode="bridge",
    ports={"8000/tcp": host_port},
)
c3.start()
c3.reload()
assert c3.ports == {"8000/tcp": [{"HostIp": "127.0.0.1", "HostPort": str(host_port)}]}, c3.ports
for _ in range(100):
    try:
        body = urllib.request.urlopen(f"http://127.0.0.1:{host_port}/i", timeout=5).read()
        break
    except OSError:
        time.sleep(0.05)
assert body == b"served\n", body
c3.remove(force=True)
print("OK ports")

out = client.containers.run(image, ["echo", "ran"], remove=True)
assert out == b"ran\n", out
try:
    client.containers.run(image, ["sh", "-c", "echo bad >&2; exit 3"], remove=True)
    raise AssertionError("no ContainerError")
except docker.errors.ContainerError as e:
    assert e.exit_status == 3, e.exit_status
print("OK run")

try:
    client.containers.create("no/such-image:v1", command="true")
    raise AssertionError("no ImageNotFound")
except docker.errors.ImageNotFound:
    pass
print("OK image not found")
# images.get(ref).save(): GET /images/{name}/get, a docker-save tarball.
tar = b"".join(client.images.get(image).save())
with tarfile.open(fileobj=io.BytesIO(tar)) as tf:
    names = tf.getnames()
assert "manifest.json" in names, names
print("OK image save")

client.close()
print("OK close")
