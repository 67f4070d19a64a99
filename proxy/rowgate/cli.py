"""The `rowgate` command."""

from __future__ import annotations

import argparse
import logging
import sys

from rowgate.config import ConfigError, add_serve_arguments, config_from_args
from rowgate.logs import setup_logging
from rowgate.spark_protocol import load_protocol_only


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="rowgate", description="Row access policies for Spark Connect")
    commands = parser.add_subparsers(dest="command", required=True)
    serve_parser = commands.add_parser("serve", help="run the proxy")
    add_serve_arguments(serve_parser)
    # rowgate policies ...: the admin API client (proxy/rowgate/cli_policies.py)
    from rowgate.cli_policies import add_policies_arguments

    policies_parser = commands.add_parser("policies", help="manage row access policies through a running proxy")
    add_policies_arguments(policies_parser)
    args = parser.parse_args(argv)

    if args.command == "policies":
        from rowgate.cli_policies import run_policies

        return run_policies(args)

    if args.command == "serve":
        try:
            config = config_from_args(args)
        except ConfigError as e:
            print(f"rowgate: {e}", file=sys.stderr)
            return 2
        setup_logging(config.log_level)
        # Before anything imports pyspark: the proxy needs its protocol, not its client.
        load_protocol_only()
        from rowgate.app import serve

        try:
            return serve(config)
        except Exception as e:  # a start-up failure: say why, once, and exit non-zero
            logging.getLogger("rowgate").error("start-up failed: %s", e, exc_info=config.log_level == "debug")
            return 1
    return 2


if __name__ == "__main__":
    sys.exit(main())
