"""The layer under the static rules: a worker without the host's network (its own network namespace, or a
note saying why not) and with a size-limited folder (RLIMIT_FSIZE on each file, the supervisor's check
on the folder). Real workers, real sockets; the static rules are off so that the OS layer alone is seen."""

import os
import shutil
import socket
import tempfile

import pytest

import drk_lab as drk
from drk_lab.common.processes import isolate, make_read_only

HEADER = """
import socket
import time
import torch
import triton
import triton.language as tl

{setup}


@triton.jit
def relu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(y_ptr + offs, tl.where(x > 0, x, 0.0), mask=mask)


class ModelNew(torch.nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        relu_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), BLOCK=1024)
        return y
"""

NETWORK = """
try:
    socket.create_connection(("127.0.0.1", {port}), timeout=3).close()
    print("NET_REACHED")
except OSError as e:
    print("NET_BLOCKED", e)
"""

ONE_BIG_FILE = """
with open("big.bin", "wb") as f:
    try:
        f.write(b"x" * (3 << 20))
        print("WROTE_BIG")
    except OSError as e:
        print("FSIZE_BLOCKED", e)
"""

MANY_FILES = """
for i in range(4):
    with open(f"part{i}.bin", "wb") as f:
        f.write(b"x" * (1 << 20))
time.sleep(3)
"""


def test_a_worker_cannot_reach_the_hosts_network(relu_small):
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(4)
    code = HEADER.format(setup=NETWORK.format(port=listener.getsockname()[1]))
    result = drk.evaluate(relu_small, code, device="cpu", hack_checks=False)
    listener.close()
    assert result.correct, result.summary()
    notes = [n for n in result.notes if "network isolation" in n]
    if notes:  # an OS that refuses namespaces: the result says so
        assert "NET_REACHED" in result.stdout and "the candidate ran with the host's network" in notes[0]
    else:
        assert "NET_BLOCKED" in result.stdout and "NET_REACHED" not in result.stdout


def test_isolate_as_an_unprivileged_user():
    """Without root the network and mount namespaces come inside a user namespace of its own, and a folder
    made read-only there refuses writes from native code too; or a reason, never an exception."""
    folder = tempfile.mkdtemp(dir="/tmp")  # not under the tests' private TMPDIR, which nobody else may enter
    os.chmod(folder, 0o777)  # writable for everyone outside: only the mount can refuse the write
    read, write = os.pipe()
    before = os.readlink("/proc/self/ns/net")
    pid = os.fork()
    if pid == 0:
        try:
            if os.getuid() == 0:
                os.setgid(65534)
                os.setuid(65534)
            network_note, cache_note = isolate((folder,))
            cache_note = cache_note or make_read_only((folder,))
            moved = os.readlink("/proc/self/ns/net") != before
            try:
                with open(os.path.join(folder, "x"), "w"):
                    wrote = "written"
            except OSError as e:
                wrote = e.strerror
            os.write(write, f"{moved}|{network_note}|{cache_note}|{wrote}".encode())
        finally:
            os._exit(0)
    os.close(write)
    moved, network_note, cache_note, wrote = os.read(read, 4096).decode().split("|", 3)
    os.waitpid(pid, 0)
    shutil.rmtree(folder, ignore_errors=True)
    assert (moved == "True" and network_note == "None") or (moved == "False" and "no network isolation" in network_note)
    assert (cache_note == "None" and wrote == "Read-only file system") or "Python code only" in cache_note


@pytest.fixture
def small_scratch():
    drk.configure(scratch_bytes=2 << 20)
    yield
    drk.configure(scratch_bytes=1 << 30)


@pytest.mark.slow
def test_a_file_over_the_limit_cannot_be_written(relu_small, small_scratch):
    result = drk.evaluate(relu_small, HEADER.format(setup=ONE_BIG_FILE), device="cpu", hack_checks=False)
    assert result.correct and "FSIZE_BLOCKED" in result.stdout and "File too large" in result.stdout


@pytest.mark.slow
def test_a_folder_over_the_limit_ends_the_evaluation(relu_small, small_scratch):
    result = drk.evaluate(relu_small, HEADER.format(setup=MANY_FILES), device="cpu", hack_checks=False)
    assert result.error_kind == "oom" and "the job's folder passed its 2 MiB limit" in result.error
