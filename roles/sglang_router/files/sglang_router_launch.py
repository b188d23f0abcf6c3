#!/usr/bin/env python3
"""Start sglang-router with its API key read from a file, never from the command line.

    sglang_router_launch.py [--check] [--key-file FILE] -- ROUTER FLAGS...

The router's own parser reads the flags (sglang_router.launch_router.parse_router_args, as
`python -m sglang_router.launch_router` does), with `--api-key <key>` added in-process from FILE
(root:<router user> 0640). No process's argv, the unit file or the journal ever holds the key.

--check parses only, with the installed router's parser, and prints the settings as JSON (without
the key): the role's flag lint. A flag the router rejects exits 2 with argparse's message.
"""
import dataclasses
import json
import sys

def main(argv):
    check = argv[:1] == ["--check"]
    argv = argv[1:] if check else argv
    key_file = ""
    if argv[:1] == ["--key-file"]:
        key_file, argv = argv[1], argv[2:]
    argv = argv[1:] if argv[:1] == ["--"] else argv
    if any(word == "--api-key" or word.startswith("--api-key=") for word in argv):
        sys.stderr.write("sglang_router_launch: --api-key on the command line would show in ps and the "
                         "journal: give it with --key-file\n")
        return 2
    from sglang_router.launch_router import launch_router, parse_router_args
    if check:
        args = parse_router_args(argv)
        print(json.dumps(dataclasses.asdict(args), default=str, sort_keys=True))
        return 0
    key = ""
    if key_file:
        with open(key_file) as handle:
            key = handle.read().strip()
    launch_router(parse_router_args(argv + (["--api-key", key] if key else [])))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
