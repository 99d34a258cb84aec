"""Run a command as on a machine without Graphviz: the `dot` program is hidden from PATH.

    python tools/without_dot.py COMMAND [ARGS...]

Each directory on PATH that holds `dot` is replaced by a temporary one holding links
to everything else in it, so the rest of the system (python, make, ...) stays
reachable. The command's exit status is returned. `make check-without-dot` uses it
to prove that the steps that draw graphs run, and their notebooks pass, without `dot`.
"""
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile


def path_without(program, path, shadows):
    """`path` (a PATH string) with every directory that holds `program` replaced by a link farm without it."""
    folders = []
    for folder in path.split(os.pathsep):
        if folder and (pathlib.Path(folder) / program).exists():
            shadow = pathlib.Path(tempfile.mkdtemp(prefix="without-dot-", dir=shadows))
            for entry in pathlib.Path(folder).iterdir():
                if entry.name != program:
                    (shadow / entry.name).symlink_to(entry)
            folder = str(shadow)
        folders.append(folder)
    return os.pathsep.join(folders)


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    with tempfile.TemporaryDirectory() as shadows:
        path = path_without("dot", os.environ.get("PATH", ""), shadows)
        if shutil.which("dot", path=path) is not None:
            sys.exit("without_dot: could not hide dot from PATH")
        print(f"without_dot: `dot` hidden from PATH for: {' '.join(sys.argv[1:])}", flush=True)
        return subprocess.run(sys.argv[1:], env=dict(os.environ, PATH=path)).returncode


if __name__ == "__main__":
    sys.exit(main())
