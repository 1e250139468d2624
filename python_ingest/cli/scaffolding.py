"""What the scaffold commands share (``sluice tap --scaffold``, ``sluice debezium scaffold``):
the config file their jobs are added to, and what they wrote, said."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any


def config_file(args: argparse.Namespace) -> Path:
    """The config file the jobs are added to (--config, $SLUICE_CONFIG, or ./sluice.yml)."""
    from python_ingest.config import CONFIG_ENV, DEFAULT_CONFIG_FILE

    return Path(args.config or os.environ.get(CONFIG_ENV) or DEFAULT_CONFIG_FILE)


def say_scaffolded(result: Any, project: Path, config: Path, next_step: str) -> None:
    """The files written and kept, the jobs added to ``config`` (or, without a config file,
    the jobs: to paste), then ``next_step``."""
    import yaml

    for path in result.written:
        print(f"wrote {path.relative_to(project) if path.is_relative_to(project) else path}")
    if result.kept:
        print(f"kept {len(result.kept)} existing file(s) as they are")
    if config.is_file():
        print(f"jobs added to {config}: {', '.join(result.jobs_added) or 'none (all present)'}")
    else:
        print(yaml.safe_dump({"jobs": result.jobs}, sort_keys=False), end="")
    print(next_step)
