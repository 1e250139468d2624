"""The ``sluice broker`` command (registered by python_ingest.cli.main): the embedded
Apache Kafka broker."""

from __future__ import annotations

import argparse

from python_ingest.config import Settings


def cmd_broker(args: argparse.Namespace, settings: Settings) -> int:
    """Start, stop or check the embedded broker."""
    from python_ingest.kafka import broker

    bootstrap = settings.broker.bootstrap_servers
    if args.action == "start":
        started = broker.start(settings)
        print(f"broker {'started' if started else 'already running'} on {bootstrap}")
    elif args.action == "stop":
        stopped = broker.stop(settings)
        print(f"broker {'stopped' if stopped else 'was not running'} (data kept in "
              f"{settings.broker.data_dir})")
    else:
        up = broker.is_up(bootstrap)
        state = broker.status(settings) if settings.broker.embedded else None
        detail = ""
        if state is not None:
            detail = (f" (embedded Apache Kafka {state.version or '?'}"
                      + (f", pid {state.pid}" if state.pid else ", not started by sluice")
                      + f", data in {state.data_dir})")
        print(f"broker on {bootstrap}: {'up' if up else 'down'}{detail}")
        return 0 if up else 1
    return 0
