import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).resolve().parent / "fixtures"
for sub in ("plugins/modules", "plugins/filter", "files/lab", "tools"):
    sys.path.insert(0, str(ROOT / sub))
