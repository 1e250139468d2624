"""S3Proxy: a private S3-compatible server for the S3 tests and ``make bench-cluster``.

``jvm/s3proxy/pom.xml`` pins ``org.gaul:s3proxy`` (one jar with its dependencies, on Maven
Central). ``make setup`` runs ``python -m python_ingest.runtime.s3proxy resolve``, which copies
the jar once into ``<jars home>/s3proxy-<sha256 of the pom, 12 hex>/``. ``start`` runs it on the
machine's Java 17 with its filesystem backend (a bucket is a folder of ``data_dir``), on a free
loopback port, with an access key and secret of its own (S3's v2/v4 signatures checked), and
waits until it answers. ``stop`` and ``start_again`` take the same server down and up on the
same port and data (the tests' outage of the object store). Nothing is fetched at run time.

Why S3Proxy (docs/deploy.md): where sluice depends on S3 it behaves as S3 does here: a
conditional ``PutObject`` (``If-None-Match: *``) on an existing key is refused with 412, a key
is listed as soon as its write returned, multipart uploads work; and it starts in under a
second. SeaweedFS also runs here but takes minutes to build; MinIO is AGPL.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from python_ingest.exceptions import SetupError
from python_ingest.runtime.jars import copy_dependencies, hashed_dir, repo_root, resolve_command
from python_ingest.runtime.processes import await_answer, free_port, stop_server
from python_ingest.runtime.publish import publish_folder

POM = Path("jvm") / "s3proxy" / "pom.xml"


def jar_dir(home: Path | None = None, root: Path | None = None) -> Path:
    """Where the jar lives: named after the pom's content hash."""
    return hashed_dir(home, "s3proxy", (root or repo_root()) / POM)


def _jar(folder: Path) -> Path | None:
    found = sorted(folder.glob("s3proxy-*.jar")) if folder.is_dir() else []
    return found[0] if found else None


def resolve(home: Path | None = None, root: Path | None = None) -> Path:
    """Copy the pinned jar from Maven Central once; returns its folder."""
    root = root or repo_root()
    final = jar_dir(home, root)
    if _jar(final) is not None:
        return final

    def fill(tmp: Path) -> None:
        copy_dependencies(root / POM, tmp, "-DexcludeTransitive=true", "S3Proxy",
                          lambda folder: _jar(folder) is not None)

    return publish_folder(final, fill, lambda folder: _jar(folder) is not None)


@dataclass
class S3Server:
    """A running S3Proxy: its endpoint, credentials, data folder and process."""

    data_dir: Path
    port: int = 0
    access_key: str = field(default_factory=lambda: "sluice-" + secrets.token_hex(4))
    secret_key: str = field(default_factory=lambda: secrets.token_hex(16), repr=False)
    process: subprocess.Popen[bytes] | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def bucket(self, name: str) -> str:
        """Create bucket ``name`` (a folder of the filesystem backend); its ``s3a://`` URL."""
        (self.data_dir / "buckets" / name).mkdir(parents=True, exist_ok=True)
        return f"s3a://{name}"

    def env(self) -> dict[str, str]:
        """What a sluice process needs in its environment to reach this server with the
        ``s3:`` section's defaults (credentials from the AWS variables)."""
        return {"AWS_ACCESS_KEY_ID": self.access_key, "AWS_SECRET_ACCESS_KEY": self.secret_key,
                "SLUICE_S3_ENDPOINT": self.endpoint}

    def start(self, wait_s: float = 60.0) -> S3Server:
        jar = _jar(jar_dir())
        if jar is None:
            raise SetupError(f"S3Proxy is not resolved in {jar_dir()}: run 'make setup'")
        self.port = self.port or free_port()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        (self.data_dir / "buckets").mkdir(exist_ok=True)
        conf = self.data_dir / "s3proxy.conf"
        conf.write_text(
            f"s3proxy.endpoint=http://127.0.0.1:{self.port}\n"
            "s3proxy.authorization=aws-v2-or-v4\n"
            f"s3proxy.identity={self.access_key}\ns3proxy.credential={self.secret_key}\n"
            "jclouds.provider=filesystem\n"
            f"jclouds.filesystem.basedir={self.data_dir / 'buckets'}\n"
            f"jclouds.identity={self.access_key}\njclouds.credential={self.secret_key}\n")
        conf.chmod(0o600)
        log = self.data_dir / "s3proxy.log"
        with log.open("ab") as out:
            self.process = subprocess.Popen(
                ["java", "-Xmx256m", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC",
                 "-jar", str(jar), "--properties", str(conf)],
                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True)
        await_answer(self.process, self.answers, self.stop, what="S3Proxy", url=self.endpoint,
                     log=log, wait_s=wait_s, pause_s=0.2)
        return self

    def answers(self) -> bool:
        """Whether the server answers HTTP (any status: an unsigned request is refused)."""
        try:
            with urllib.request.urlopen(self.endpoint + "/", timeout=2):
                return True
        except urllib.error.HTTPError:
            return True
        except OSError:
            return False

    def stop(self) -> None:
        if self.process is not None:
            stop_server(self.process, 10)
            self.process = None

    def start_again(self) -> S3Server:
        """After ``stop``: the same server (port, credentials, objects) up again."""
        return self.start()


def main(argv: list[str]) -> int:
    """``resolve [JARS_DIR]``: fetch the jar once; prints its folder."""
    return resolve_command(argv, resolve)


if __name__ == "__main__":  # used by `make setup`
    os.umask(0o022)
    sys.exit(main(sys.argv[1:]))
