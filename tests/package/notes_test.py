#!/usr/bin/env python3
"""Fails when the tree's Notes break the one form (../shared/STYLE.md):
a Note is defined by a comment line of its own, `// Note [Name]` (or `# Note
[Name]`), its text below; everywhere else `Note [Name]` is a citation, which
must name exactly one definition. `Note [Name]:` as a label is refused:
it reads as a definition, and a citation a reader cannot follow is a dead
end."""
import pathlib
import re
import sys

root = pathlib.Path(sys.argv[1])
kinds = {".cc", ".h", ".cu", ".cpp", ".sh", ".py", ".cmake", ".md", ".txt"}
dirs = ["src", "include", "tools", "tests", "examples", "bench", "fuzz", "scripts", "docs",
        "cmake", ".ci"]
definition = re.compile(r"^\s*(//|#)\s*Note \[([^\]]+)\]\s*$")
mention = re.compile(r"Note \[([^\]]+)\](:?)")
defs, cites, problems = {}, [], []
for d in dirs:
    for path in sorted((root / d).rglob("*")):
        if not path.is_file() or (path.suffix not in kinds and path.name != "run"):
            continue
        if path.resolve() == pathlib.Path(__file__).resolve():  # this file names the forms
            continue
        where = path.relative_to(root)
        for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            m = definition.match(line)
            if m:
                defs.setdefault(m.group(2), []).append(f"{where}:{n}")
                continue
            for c in mention.finditer(line):
                if c.group(1) == "...":  # the guide's placeholder
                    continue
                if c.group(2):
                    problems.append(f"{where}:{n}: 'Note [{c.group(1)}]:' as a label; define it "
                                    f"on a line of its own, or cite it without the colon")
                cites.append((f"{where}:{n}", c.group(1)))
if not defs:
    problems.append(f"no Note definitions found under {root}: wrong root?")
for name, places in defs.items():
    if len(places) > 1:
        problems.append(f"Note [{name}] is defined {len(places)} times: {', '.join(places)}")
for where, name in cites:
    if name not in defs:
        problems.append(f"{where}: cites Note [{name}], which no line defines")
print("\n".join(problems) if problems else f"{len(defs)} Notes, {len(cites)} citations: one form")
sys.exit(1 if problems else 0)
