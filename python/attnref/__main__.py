# SPDX-License-Identifier: Apache-2.0
"""`python -m attnref <args>` and the `attnref-run` command: run the attnref-run program that
the wheel holds (attnref/bin/attnref-run) with the same arguments."""
import os
import sys


def main():
    exe = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bin", "attnref-run")
    if not os.access(exe, os.X_OK):
        sys.exit(f"attnref: {exe} not found; attnref-run comes with the installed wheel "
                 "(pip install), not with a build tree")
    os.execv(exe, [exe] + sys.argv[1:])


if __name__ == "__main__":
    main()
