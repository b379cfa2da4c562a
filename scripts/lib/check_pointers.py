#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Every file a comment or a document names exists (scripts/check pointers).

Reads the comments of the tracked C++, shell, CMake, SQL and Python files
and the whole text of the Markdown files, takes every token that looks like
a path to a source or a document (a name with one of EXTENSIONS, with or
without folders), and looks for it: from the repository's root, from the
naming file's folder (Markdown links), as the tail of a tracked path
(`server/config.cpp` inside main/), and under /usr/include (CAF's headers).
A bare file name must be the name of some tracked file; a folder of the
tree (`tools/bench/reference/`, with its slash) must exist. Prints each one
found nowhere as FILE:LINE: NAME and exits 1 if there is one.

Left out: CHANGELOG.md (it names files as they were then), the chains the
release replaced (tests/persistence/fixtures, history kept as it was) and
the versioned migrations (checksummed: a released migration's text never
changes, so its comments keep the names of their day). Placeholders in capitals
(`DATA-DIR/catalog.json`, `NNN_name.sql`), URLs, the build's and var/'s
outputs and paths under an install prefix are not pointers.
"""
import os
import re
import subprocess
import sys

EXTENSIONS = "cpp|hpp|sql|md|sh|py|cmake|yml|yaml|json|conf"
# A bare name is a pointer only with these: `run.json` in a shell script's
# comment is an output, `chaos.json` in a document an example.
BARE_EXTENSIONS = (".cpp", ".hpp", ".md", ".sh", ".py", ".cmake")
# Files of other projects the text names by their own names.
OUTSIDE = {
    "run.sh",  # the pgbench reference kit's runner (tools/bench/reference)
    "postgresql.conf",
}
# Paths under an install prefix (docs/install.md), not in the tree.
INSTALLED = ("etc/", "share/", "bin/", "usr/")
SKIPPED = re.compile(
    r"^(CHANGELOG\.md|persistence/migrations/\d+_.*\.sql"
    r"|tests/persistence/fixtures/migrations_[0-9.]+_chain/.*\.sql)$"
)

TOKEN = re.compile(
    r"(?<![\w./<>$@{}*%-])"
    r"((?:\.\.?/)*[A-Za-z0-9_][A-Za-z0-9_.-]*(?:/[A-Za-z0-9_.-]+)*"
    r"\.(?:" + EXTENSIONS + r"))(?![\w/])"
)
# A folder: a path of the tree's top-level folders that ends in a slash.
FOLDER = re.compile(r"(?<![\w./<>$@{}*%-])((?:[A-Za-z0-9_.-]+/){2,})(?![\w.*-])")
PLACEHOLDER = re.compile(r"(^|/)[A-Z]{2,}[-_]|(^|/)[A-Z][A-Z-]*/")
URL = re.compile(r"[a-z]+://\S*$")


def comment_marker(path):
    if path.endswith((".cpp", ".hpp")):
        return "//"
    if path.endswith(".sql"):
        return "--"
    return "#"


def scanned(path):
    if path.endswith((".cpp", ".hpp", ".md", ".sh", ".py", ".cmake", ".sql")):
        return True
    name = os.path.basename(path)
    if name == "CMakeLists.txt":
        return True
    # Scripts without an extension: scripts/*, tools/ha-cluster/ha-cluster.
    try:
        with open(path, "rb") as f:
            return f.read(2) == b"#!"
    except OSError:
        return False


def main():
    os.chdir(os.path.join(os.path.dirname(os.path.abspath(__file__)), "../.."))
    files = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard"],
        check=True, capture_output=True, text=True).stdout.split("\n")
    files = [f for f in files if f and os.path.isfile(f)]
    tracked = set(files)
    names = {os.path.basename(f) for f in files}
    top_folders = {f.split("/")[0] for f in files if "/" in f}
    system = set()
    for top, _, found in os.walk("/usr/include"):
        for name in found:
            system.add(os.path.relpath(os.path.join(top, name), "/usr/include"))
    system_names = {os.path.basename(p) for p in system}

    def exists(token, naming_file):
        if os.path.exists(token):
            return True
        if os.path.exists(os.path.join(os.path.dirname(naming_file), token)):
            return True
        if "/" not in token:
            return token in names or token in system_names
        tail = "/" + token.lstrip("./")
        return (any(f.endswith(tail) for f in tracked)
                or token in system
                or any(p.endswith(tail) for p in system))

    missing = []
    for path in files:
        if SKIPPED.match(path) or not scanned(path):
            continue
        try:
            with open(path, encoding="utf-8") as f:
                lines = f.read().split("\n")
        except (OSError, UnicodeDecodeError):
            continue
        markdown = path.endswith(".md")
        marker = comment_marker(path)
        for number, line in enumerate(lines, 1):
            start = 0
            if not markdown:
                start = line.find(marker)
                if start < 0:
                    continue
            for match in TOKEN.finditer(line, start):
                token = match.group(1)
                if (token in OUTSIDE or PLACEHOLDER.search(token)
                        or URL.search(line[:match.start()])
                        or token.startswith(("build/", "var/"))
                        or token.startswith(INSTALLED)
                        or ("/" not in token
                            and not token.endswith(BARE_EXTENSIONS))):
                    continue
                if not exists(token, path):
                    missing.append(f"{path}:{number}: {token}")
            for match in FOLDER.finditer(line, start):
                token = match.group(1)
                if (token.split("/")[0] in top_folders
                        and not os.path.isdir(token)
                        and not URL.search(line[:match.start()])):
                    missing.append(f"{path}:{number}: {token}")
    for entry in missing:
        print(entry)
    if missing:
        print(f"pointers: {len(missing)} names of files that do not exist",
              file=sys.stderr)
        return 1
    print(f"pointers: every file named in {len(files)} files exists")
    return 0


if __name__ == "__main__":
    sys.exit(main())
