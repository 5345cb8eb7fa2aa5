#!/usr/bin/env python3
"""`tally chat` driven through a pseudo-terminal, as a person at a terminal
drives it: the banner, commands, line editing (arrows, Backspace), the
history (Up, kept in $TALLY_HOME/chat_history across runs), a message of
several lines between \"\"\" lines, Ctrl-C during a reply (the reply stops, the
chat goes on, the partial reply is kept and marked), Ctrl-C on a line with
text (dropped), Ctrl-C at an empty prompt and twice during a reply (leave),
Ctrl-D (leave, the shell's prompt on a line of its own). And, at the same
terminal, `tally perplexity`'s progress line: window i of N and the time left.

    usage: chat_pty.py path/to/tally
Exit 77 (skipped) when smollm2:135m is not installed, unless TALLY_REQUIRE_MODEL=1.
"""
import fcntl
import json
import os
import pty
import re
import select
import subprocess
import struct
import sys
import tempfile
import termios
import time

ANSI = re.compile(rb"\x1b\[[0-9;?]*[A-Za-z]|\x1b[()][A-Z0-9]|\x1b[=>]|\r")
UP, DOWN, LEFT, CTRL_C, CTRL_D = "\x1b[A", "\x1b[B", "\x1b[D", "\x03", "\x04"


class Terminal:
    def __init__(self, tally, model, home, *args):
        self.master, slave = pty.openpty()
        # A terminal's size, as a real one has: 40 rows of 160 columns (a line cut to the width stays whole).
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 160, 0, 0))
        env = dict(os.environ, TALLY_HOME=home, TERM="xterm")
        # The terminal is the chat's controlling terminal, so that Ctrl-C is a SIGINT as at a real one.
        def controlling_terminal():
            os.setsid()
            fcntl.ioctl(0, termios.TIOCSCTTY, 0)

        self.proc = subprocess.Popen([tally, *args[:1], "-m", model, *args[1:]], stdin=slave, stdout=slave,
                                     stderr=slave, env=env, preexec_fn=controlling_terminal, close_fds=True)
        os.close(slave)
        self.raw = b""
        self.seen = 0  # characters of text() already matched past

    def read(self, timeout):
        r, _, _ = select.select([self.master], [], [], timeout)
        if not r:
            return False
        try:
            data = os.read(self.master, 65536)
        except OSError:  # the child closed the terminal
            return False
        self.raw += data
        return bool(data)

    def text(self):
        """What the terminal shows, escapes and carriage returns left out."""
        return ANSI.sub(b"", self.raw).decode("utf-8", "replace")

    def expect(self, pattern, timeout=60):
        """Waits for pattern in the output after the last match; returns the text up to it."""
        deadline = time.time() + timeout
        rx = re.compile(pattern)
        while True:
            t = self.text()
            m = rx.search(t, self.seen)
            if m:
                start = self.seen
                self.seen = m.end()
                return t[start:m.end()]
            left = deadline - time.time()
            if left <= 0 or (self.proc.poll() is not None and not self.read(0.2)):
                raise AssertionError(f"waited for {pattern!r}; the terminal shows:\n{self.text()[-3000:]}")
            self.read(min(left, 0.5))

    def prompt(self, text="> "):
        """Waits for the prompt, and a moment more: a person types after the editor has the terminal
        (keys sent in the same instant reach the terminal's own line discipline, which echoes them)."""
        self.expect(r"\n" + re.escape(text) + "$")
        time.sleep(0.3)

    def send(self, keys):
        os.write(self.master, keys.encode())

    def wait(self, timeout=30):
        deadline = time.time() + timeout
        while self.proc.poll() is None and time.time() < deadline:
            self.read(0.2)
        while self.read(0.1):
            pass
        if self.proc.poll() is None:
            self.proc.kill()
            raise AssertionError(f"the chat did not leave; the terminal shows:\n{self.text()[-2000:]}")
        return self.proc.returncode


def Chat(tally, model, home, *args):
    return Terminal(tally, model, home, "chat", "--temp", "0", *args)


def find_model(tally):
    listing = json.loads(subprocess.run([tally, "list", "--json"], capture_output=True, text=True, check=True).stdout)
    for m in listing["models"]:
        if m["name"] == "smollm2:135m" and m.get("installed"):
            return m["path"]
    return None


def main():
    tally = os.path.abspath(sys.argv[1])
    model = find_model(tally)
    if model is None:
        print("chat_pty: smollm2:135m is not installed (tally pull smollm2:135m)")
        return 1 if os.environ.get("TALLY_REQUIRE_MODEL") == "1" else 77
    checks = 0
    with tempfile.TemporaryDirectory() as home:
        c = Chat(tally, model, home, "-n", "300")
        c.expect(r"tally chat: SmolLM2-135M-Instruct\.Q4_1, context \d+ tokens, f16 KV cache, seed \d+")
        c.expect(r"/help for commands.*")
        c.prompt()
        checks += 1

        c.send("/help\r")
        c.expect(r"/system \[TEXT\]")
        c.prompt()
        c.send("/nope\r")
        c.expect(r"unknown command '/nope'; it was not sent")
        c.prompt()
        c.send("/sav\r")
        c.expect(r"unknown command '/sav' \(did you mean /save\?\)")
        c.prompt()
        checks += 1

        # Line editing: "/stts", two Lefts, "a" -> "/stats"; Backspace too.
        c.send("/stts" + LEFT + LEFT + "a" + "x\x7f" + "\r")
        c.expect(r"context: 0 of \d+ tokens in the cache, 0 turn\(s\)")
        c.prompt()
        checks += 1

        # Ctrl-C during a reply: it stops, the chat goes on.
        c.send("Write a long story about a dragon who loves the sea.\r")
        c.expect(r"dragon who loves the sea\.\n\S")  # the reply has started
        c.send(CTRL_C)
        c.expect(r"\[stopped \(Ctrl-C\): the reply so far stays in the conversation, marked stopped\]")
        reply_line = c.expect(r"\[\d+ new prompt tokens prefilled, 0 reused from the cache, (\d+) generated")
        generated = int(re.search(r"(\d+) generated", reply_line).group(1))
        assert generated < 300, f"the reply was not stopped: {generated} tokens"
        c.prompt()
        c.send("/stats\r")
        c.expect(r"context: \d+ of \d+ tokens in the cache, 1 turn\(s\)")
        c.prompt()
        checks += 1

        # The stopped reply is kept and marked in a saved conversation.
        saved = os.path.join(home, "dragon.session")
        c.send(f"/save {saved}\r")
        c.expect(r"\[saved \d+ tokens to ")
        c.prompt()
        with open(saved, "rb") as f:
            assert b'"role":"assistant","stopped":true' in f.read().replace(b" ", b""), "the stopped reply is not marked"
        checks += 1

        # History: Up recalls the last line sent (/save ...), Up again the one before (/stats).
        c.send(UP + UP + "\r")
        c.expect(r"context: \d+ of \d+ tokens in the cache, 1 turn\(s\)")
        c.prompt()
        checks += 1

        # Ctrl-C on a line with text drops the line; nothing is sent.
        c.send("this is never sent" + CTRL_C)
        c.expect(r"\^C")
        c.prompt()
        c.send("/stats\r")
        c.expect(r"1 turn\(s\)")
        c.prompt()
        checks += 1

        # A message of several lines between """ lines.
        c.send('"""\r')
        c.prompt("... ")
        c.send("Say the word yes.\r")
        c.prompt("... ")
        c.send("Only that word.\r")
        c.prompt("... ")
        c.send('"""\r')
        c.expect(r"\[\d+ new prompt tokens prefilled, \d+ reused from the cache")
        c.prompt()
        c.send("/stats\r")
        c.expect(r"2 turn\(s\)")
        c.prompt()
        checks += 1

        # Ctrl-D at an empty prompt leaves, with the next line starting clean.
        c.send(CTRL_D)
        rc = c.wait()
        assert rc == 0, f"Ctrl-D: exit {rc}"
        tail = c.raw[-8:]
        assert tail.endswith(b"\n"), f"Ctrl-D did not end the line: {tail!r}"
        checks += 1

        # The history is kept in $TALLY_HOME: a new chat recalls the last run's lines.
        assert os.path.exists(os.path.join(home, "chat_history")), "no history file"
        c = Chat(tally, model, home, "-n", "300")
        c.prompt()
        c.send(UP)
        c.expect(r"/stats")  # the last line sent
        c.send(UP)
        c.expect(r'"""')  # the one before: the end of the block
        c.send(DOWN + "\r")  # back to /stats, sent
        c.expect(r"context: 0 of \d+ tokens in the cache, 0 turn\(s\)")
        c.prompt()
        checks += 1

        # Ctrl-C at an empty prompt leaves.
        c.send(CTRL_C)
        rc = c.wait()
        assert rc == 0, f"Ctrl-C at an empty prompt: exit {rc}"
        checks += 1

        # Ctrl-C twice before a reply has stopped leaves at once: here during the prefill of a long
        # message (seconds), when the first Ctrl-C cannot be honoured before the first token.
        c = Chat(tally, model, home, "-n", "300")
        c.prompt()
        c.send("word " * 1500 + "\r")
        time.sleep(1.0)
        c.send(CTRL_C)
        time.sleep(0.5)
        start = time.time()
        c.send(CTRL_C)
        rc = c.wait()
        assert rc == 130, f"Ctrl-C twice: exit {rc}"
        assert time.time() - start < 3, "Ctrl-C twice did not leave at once"
        assert "[stopped" not in c.text(), "the reply went on to a token before leaving"
        checks += 1

        # perplexity on a terminal: one line redrawn with window i of N and the time left.
        text = os.path.join(home, "text.txt")
        with open(text, "w") as f:
            f.write("The cat sat on the mat, and the dog sat on the log. " * 120)
        p = Terminal(tally, model, home, "perplexity", "-f", text, "-c", "32")
        p.expect(r"tally perplexity: +\d+%, \S+ elapsed, ~\S+ left \| window \d+ of (\d+), perplexity so far [0-9.]+")
        p.expect(r"perplexity [0-9.]+ \(mean nll [0-9.]+\) over \d+ predictions in \d+ windows of 32")
        assert p.wait() == 0
        assert "[window" not in p.text(), "a line per window on a terminal"
        checks += 1
    print(f"chat_pty: {checks} checks passed")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except AssertionError as e:
        print(f"chat_pty: FAIL: {e}")
        sys.exit(1)
