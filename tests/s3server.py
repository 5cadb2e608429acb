"""A real S3-compatible server for the remote tests: moto's server mode on 127.0.0.1, on a free port,
reached by s3fs the way a user reaches theirs (AWS_ENDPOINT_URL and the AWS_* keys in the
environment, which botocore reads), and the helpers the tests share."""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

import pytest

BUCKET = "bucket"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_s3():
    """(server, endpoint): a moto S3 server on 127.0.0.1 and the environment pointing at it."""
    moto_server = pytest.importorskip("moto.server", reason="moto[server] is not installed (pip install '.[test]')")
    pytest.importorskip("s3fs", reason="s3fs is not installed (pip install '.[test]')")
    port = _free_port()
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    env = {"AWS_ENDPOINT_URL": endpoint, "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
           "AWS_DEFAULT_REGION": "us-east-1"}
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    import s3fs
    s3fs.S3FileSystem.clear_instance_cache()
    fs = s3fs.S3FileSystem()
    for _ in range(50):
        try:
            fs.mkdir(BUCKET)
            break
        except OSError:
            time.sleep(0.1)
    return server, fs, old


def stop_s3(server, old) -> None:  # noqa: ANN001
    server.stop()
    for k, v in old.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


def upload(fs, files: list[Path], prefix: str) -> list[str]:  # noqa: ANN001
    """Put local files under s3://bucket/prefix/, returning their URLs."""
    urls = []
    for f in files:
        key = f"{BUCKET}/{prefix}/{f.name}"
        fs.put_file(str(f), key)
        urls.append(f"s3://{key}")
    fs.invalidate_cache()
    return urls
