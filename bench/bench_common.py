"""What the comparison scripts share: where tally, its home and the default
model are, and the options that pick the two engines' files and threads."""
import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TALLY_HOME = Path(os.environ.get("TALLY_HOME", Path.home() / ".cache/tally"))
DEFAULT_MODEL = TALLY_HOME / "models/SmolLM2-135M-Instruct.Q4_1.gguf"


def add_engine_args(ap, threads=2):
    """--model, --tally, --llama-bin and --threads, with the project's defaults."""
    ap.add_argument("--model", default=str(DEFAULT_MODEL))
    ap.add_argument("--tally", default=str(ROOT / "build/release/tally"))
    ap.add_argument("--llama-bin", default=str(TALLY_HOME / "llama.cpp/bin"))
    ap.add_argument("--threads", type=int, default=threads)
