#!/usr/bin/env python3
"""Which system calls the server unit's filter kills, and where the binaries of an install call them.

    tools/syscall_sites.py killed > KILLED.json      # needs systemd-analyze and the kernel's asm/unistd_64.h
    tools/syscall_sites.py scan KILLED.json TREE...  # needs objdump and readelf

`killed`: the x86_64 system calls that `SystemCallFilter=@system-service` then `~@privileged` leave out,
by number, as this machine's systemd-analyze expands the groups (calls newer than its table, such as
mseal, are left out too: systemd allows only what it names).
`scan`: every ELF file under the trees, disassembled: each call of syscall(3) through the PLT or GOT
(the number put in %edi) and each raw `syscall` instruction (the number in %eax) whose number is a
killed call, with the function it is in, and each killed call's glibc wrapper the file imports. A
number the code computes at run time is not seen. Prints one block per file that has any.
"""
import json
import os
import re
import subprocess
import sys

UNISTD = "/usr/include/x86_64-linux-gnu/asm/unistd_64.h"
# Added to the kernel after the headers of Debian 12, whose systemd 252 is the one the units meet.
NEWER = {451: "cachestat", 452: "fchmodat2", 453: "map_shadow_stack", 454: "futex_wake", 455: "futex_wait",
         456: "futex_requeue", 457: "statmount", 458: "listmount", 459: "lsm_get_self_attr",
         460: "lsm_set_self_attr", 461: "lsm_list_modules", 462: "mseal", 463: "setxattrat", 464: "getxattrat",
         465: "listxattrat", 466: "removexattrat"}


def filter_groups(text):
    """{group: [member, ...]} from `systemd-analyze syscall-filter`."""
    groups, current = {}, None
    for line in text.splitlines():
        item = line.strip()
        if not item or item.startswith("#"):
            continue
        if not line.startswith(" "):
            current = groups.setdefault(item, [])
        elif current is not None:
            current.append(item)
    return groups


def expand(groups, name):
    calls = set()
    for item in groups.get(name, []):
        calls |= expand(groups, item) if item.startswith("@") else {item}
    return calls


def killed(groups, numbers):
    """{number: name} of the calls SystemCallFilter=@system-service ~@privileged does not allow."""
    allowed = expand(groups, "@system-service") - expand(groups, "@privileged")
    return {n: name for n, name in sorted(numbers.items()) if name not in allowed}


def unistd_numbers(text):
    numbers = {int(m.group(2)): m.group(1) for m in re.finditer(r"#define __NR_(\w+) (\d+)", text)}
    return {**numbers, **{n: name for n, name in NEWER.items() if n not in numbers}}


def call_sites(disassembly, numbers):
    """{call name: {function, ...}} for the sites whose constant number is in `numbers`."""
    lines, function, sites = disassembly.splitlines(), "?", {}
    for i, line in enumerate(lines):
        head = re.match(r"^[0-9a-f]+ <(.+)>:$", line)
        if head:
            function = head.group(1)
            continue
        if re.search(r"\b(call|jmp)\b.*<syscall@(plt|GLIBC[^>]*)>", line):
            register = r"%(edi|rdi)"
        elif re.search(r":\s+syscall\s*$", line):
            register = r"%(eax|rax)"
        else:
            continue
        for before in reversed(lines[max(0, i - 12):i]):
            constant = re.search(r"\bmov\s+\$0x([0-9a-f]+),%s\b" % register, before)
            if constant:
                number = int(constant.group(1), 16)
                if number in numbers:
                    sites.setdefault("%s(%d)" % (numbers[number], number), set()).add(function)
                break
    return sites


def imported_wrappers(dynamic_symbols, names):
    return sorted({m.group(1) for m in re.finditer(r" UND (\w+)(@\S+)?\s*$", dynamic_symbols, re.M)} & set(names))


def elf_files(tree):
    """(path, name to print) of each ELF file under a tree (links left out), or the file itself."""
    if os.path.isfile(tree):
        yield os.path.realpath(tree), tree
        return
    for directory, _, files in sorted(os.walk(tree)):
        for name in sorted(files):
            path = os.path.join(directory, name)
            if not os.path.islink(path):
                yield path, os.path.relpath(path, tree)


def scan(numbers, trees):
    for tree in trees:
        for path, shown in elf_files(tree):
            with open(path, "rb") as handle:
                if handle.read(4) != b"\x7fELF":
                    continue
            text = subprocess.run(["objdump", "-d", "--no-show-raw-insn", "-j", ".text", path],
                                  capture_output=True, text=True).stdout
            symbols = subprocess.run(["readelf", "-W", "--dyn-syms", path], capture_output=True, text=True).stdout
            sites = call_sites(text, numbers)
            wrappers = imported_wrappers(symbols, numbers.values())
            if sites or wrappers:
                print(shown)
                for call, functions in sorted(sites.items()):
                    print("    %s in %s" % (call, "; ".join(sorted(functions))))
                if wrappers:
                    print("    imports %s" % ", ".join(wrappers))
                sys.stdout.flush()


def main(argv):
    if argv[:1] == ["killed"]:
        groups = filter_groups(subprocess.run(["systemd-analyze", "syscall-filter", "--no-pager"],
                                              capture_output=True, text=True, check=True).stdout)
        with open(UNISTD) as handle:
            numbers = unistd_numbers(handle.read())
        json.dump({str(n): name for n, name in killed(groups, numbers).items()}, sys.stdout, indent=1)
        print()
    elif argv[:1] == ["scan"] and len(argv) >= 3:
        with open(argv[1]) as handle:
            scan({int(n): name for n, name in json.load(handle).items()}, argv[2:])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
