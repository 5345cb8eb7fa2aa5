"""What the comparison scripts share: where tally, its home and the default
model are, the options that pick the two engines' files and threads, a
catalog name's file, and starting a server on a free port."""
import http.client
import json
import os
import socket
import sys
import time
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


def model_path(name, who):
    """A model file, or the file of a name in models/catalog.json under TALLY_HOME."""
    p = Path(name)
    if p.exists():
        return p
    catalog = json.loads((ROOT / "models/catalog.json").read_text())
    for m in catalog["models"]:
        if m["name"] == name:
            return TALLY_HOME / "models" / m["file"]
    sys.exit(f"{who}: no model file or catalog name '{name}'")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(port, proc, path, who, timeout=120):
    """Waits until GET path answers 200; exits naming `who` if the server exits or never does."""
    t0 = time.time()
    while time.time() - t0 < timeout:
        if proc.poll() is not None:
            sys.exit(f"{who}: a server exited at start (status {proc.returncode})")
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            c.request("GET", path)
            if c.getresponse().status == 200:
                return
        except OSError:
            pass
        time.sleep(0.3)
    sys.exit(f"{who}: a server did not answer {path} within {timeout} s")
