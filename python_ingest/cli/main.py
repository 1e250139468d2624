"""The ``sluice`` command line: its parser and the dispatch to each command's module.

The commands' bodies live beside this module, one module per group (cli/jobs.py: ingest, run,
maintain; cli/broker.py; cli/demo.py; cli/runner.py: status and the continuous runner;
cli/tap.py, report.py, verify.py, changes.py, errors.py, disperse.py, debezium.py); each adds
its own subcommands or is registered here. Heavy libraries (pyspark, dbt, great_expectations)
are imported inside the commands, so ``sluice --help`` and config errors answer at once.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable, Sequence

from python_ingest.changelog.schema import check_job_schemas
from python_ingest.cli.broker import cmd_broker
from python_ingest.cli.demo import cmd_demo, cmd_demo_produce
from python_ingest.cli.jobs import cmd_ingest, cmd_maintain, cmd_run
from python_ingest.config import Settings, load_settings
from python_ingest.exceptions import SluiceError

log = logging.getLogger("sluice")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="sluice",
        description="Land change data (Kafka changelog events) in Hudi or Iceberg tables on "
                    "Spark, exactly once.",
        epilog="Config: sluice.yml in the current folder, or --config / $SLUICE_CONFIG; "
               "environment variables SLUICE_* override it (see README).")
    parser.add_argument("--config", help="config file (default: ./sluice.yml or $SLUICE_CONFIG)")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    parser.add_argument("-q", "--quiet", action="store_true", help="warnings and errors only")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def add(name: str, func: Callable[[argparse.Namespace, Settings], int], help_text: str
            ) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_text, description=help_text)
        p.set_defaults(func=func)
        return p

    def add_jobs_target(p: argparse.ArgumentParser) -> None:
        target = p.add_mutually_exclusive_group(required=True)
        target.add_argument("job", nargs="?", help="job name from the config")
        target.add_argument("--all", action="store_true", help="every job in the config")
        p.add_argument("--accept-data-loss", action="store_true",
                       help="continue from the earliest offset when the checkpoint's offsets "
                            "are gone (the loss is recorded in the run)")

    add_jobs_target(add("ingest", cmd_ingest,
                        "Ingest new Kafka messages of a job into raw.<table>."))

    from python_ingest.cli.runner import add_status_command

    add_status_command(add)  # sluice status

    run = add("run", cmd_run, "Run jobs' pipelines: ingest, staging (dbt), fork (Great "
              "Expectations), merge into the lake table, reports; once, or continuously.")
    target = run.add_mutually_exclusive_group(required=True)
    target.add_argument("job", nargs="*", default=[], help="job name(s) from the config")
    target.add_argument("--all", action="store_true", help="every job in the config")
    run.add_argument("--accept-data-loss", action="store_true",
                     help="continue from the earliest offset when the checkpoint's offsets are "
                          "gone (the loss is recorded in the run)")
    from python_ingest.cli.runner import add_runner_options

    add_runner_options(run)

    maintain = add("maintain", cmd_maintain, "Run the table services of a job's tables now "
                   "(Hudi: compaction, cleaning, archival; Iceberg: compaction, snapshot "
                   "expiry keeping every checkpoint, orphan files older than 3 days removed; "
                   "the global index compacted; raw rows older than services.raw_retention "
                   "expired).")
    target = maintain.add_mutually_exclusive_group(required=True)
    target.add_argument("job", nargs="?", help="job name from the config")
    target.add_argument("--all", action="store_true", help="every job in the config")

    brk = add("broker", cmd_broker, "Start, stop or check the embedded Apache Kafka broker.")
    brk.add_argument("action", choices=("start", "stop", "status"))

    demo_p = add("demo", cmd_demo, "Run the demo: broker, demo events, the full pipeline "
                                    "twice, a summary.")
    demo_p.add_argument("--events", type=int, default=20_000, help="events to produce")
    demo_p.add_argument("--live-seconds", type=float, default=60, metavar="S",
                        help="then run the job manager continuously for S seconds while events "
                             "keep arriving (0: skip; default 60)")
    demo_p.add_argument("--live-rate", type=int, default=50, metavar="N",
                        help="events per second produced meanwhile (default 50)")
    demo_sub = demo_p.add_subparsers(dest="demo_command", metavar="SUBCOMMAND")
    produce = demo_sub.add_parser("produce", help="only produce demo changelog events",
                                  description="Produce demo changelog events for 'trips'.")
    produce.add_argument("--events", type=int, default=20_000, help="how many (default 20000)")
    produce.add_argument("--topic", default="demo.trips", help="topic (default demo.trips)")
    produce.add_argument("--seed", type=int, help="random seed (default: derived from the topic)")
    produce.set_defaults(func=cmd_demo_produce)

    from python_ingest.cli.tap import add_tap_commands

    add_tap_commands(add)  # sluice tap, sluice bootstrap
    from python_ingest.cli.report import add_report_commands

    add_report_commands(add)  # sluice report
    from python_ingest.cli.verify import add_verify_commands

    add_verify_commands(add)  # sluice verify
    from python_ingest.cli.changes import add_changes_command

    add_changes_command(add)  # sluice changes
    from python_ingest.cli.errors import add_errors_commands

    add_errors_commands(add)  # sluice errors [replay]
    from python_ingest.cli.disperse import add_disperse_command

    add_disperse_command(add)  # sluice disperse
    from python_ingest.cli.debezium import add_debezium_commands

    add_debezium_commands(add)  # sluice debezium scaffold
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    import contextlib
    import faulthandler
    import signal

    # `kill -USR1 <pid>` prints every thread's stack to stderr (when stderr is a file: not when
    # the CLI is called in-process under a captured stream)
    with contextlib.suppress(AttributeError, ValueError, OSError):
        faulthandler.register(signal.SIGUSR1, all_threads=True)
    parser = build_parser()
    args = parser.parse_args(argv)
    level = logging.DEBUG if args.verbose else logging.WARNING if args.quiet else logging.INFO
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                        datefmt="%H:%M:%S")
    for noisy in ("py4j", "urllib3"):
        logging.getLogger(noisy).setLevel(logging.WARNING if not args.verbose else logging.INFO)
    # kafka-python logs connection chatter (even as ERROR on a normal close); sluice itself
    # reports broker problems as errors that say what to do.
    logging.getLogger("kafka").setLevel(logging.CRITICAL if not args.verbose else logging.INFO)
    try:
        settings = load_settings(args.config)
        check_job_schemas(settings)  # every job's schema parses and has its keys: before data moves
        return int(args.func(args, settings))
    except SluiceError as exc:
        print(f"sluice: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("sluice: interrupted; the last committed checkpoint stays in place",
              file=sys.stderr)
        return 130
    except Exception:
        from python_ingest.runtime.session import jvm_exit

        gone = jvm_exit()
        if gone is None:
            raise
        # py4j's connection errors say only that the JVM did not answer: say why
        print(f"sluice: error: {gone}; the last committed checkpoint stays in place",
              file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
