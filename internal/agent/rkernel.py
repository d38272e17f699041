# The harness of an R context (kernels.go): it starts IRkernel, R's Jupyter
# kernel as E2B runs it, and drives it over the Jupyter protocol with
# jupyter_client (in the template's venv beside ipykernel), so results,
# output and errors are exactly IRkernel's. It speaks the agent's line
# protocol of stateful contexts, as jsrepl.cjs does: calls as JSON lines on
# fd 3 ({"code", "envs"}), events as JSON lines on fd 4: stdout, stderr,
# result and display (a MIME bundle under "data"), error, done.
#
# The agent stops a call (its timeout) with SIGINT to the process group: R
# takes it as an interrupt and keeps its state; this process ignores it.
# When R dies, this process exits, and the agent reports the kernel dead.

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile

from jupyter_client import BlockingKernelClient
from jupyter_client.connect import write_connection_file

REQ_FD, EV_FD = 3, 4
os.set_inheritable(REQ_FD, False)
os.set_inheritable(EV_FD, False)
events = os.fdopen(EV_FD, "w", encoding="utf-8", errors="replace", buffering=1)
calls = os.fdopen(REQ_FD, "r", encoding="utf-8")

# How often a wait on R checks that it is still alive.
POLL = 0.5


def send(**msg):
    events.write(json.dumps(msg) + "\n")
    events.flush()


def rstring(s):
    """An R string literal of s."""
    out = []
    for ch in s:
        if ch in '\\"':
            out.append("\\" + ch)
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append("\\u{%x}" % ord(ch))
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


class Died(Exception):
    pass


class Kernel:
    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="lizard-r-")
        conn = os.path.join(self.dir, "kernel.json")
        write_connection_file(conn, ip="127.0.0.1", transport="tcp")
        # R's own output (what system() prints, R's start-up errors) goes to
        # this process's stderr, which the agent keeps the end of. R's
        # session directory (tempdir()) is made in this one, removed with it.
        self.proc = subprocess.Popen(
            ["R", "--slave", "--no-save", "--no-restore", "-e", "IRkernel::main()", "--args", conn],
            stdin=subprocess.DEVNULL, stdout=sys.stderr, stderr=sys.stderr,
            env=dict(os.environ, TMPDIR=self.dir))
        self.client = BlockingKernelClient(connection_file=conn)
        self.client.load_connection_file()
        # No heartbeat channel: jupyter_client takes a heart not beating yet
        # (R still starting, under load) for a dead kernel. Whether R lives
        # is its process's to say.
        self.client.start_channels(hb=False)
        self.ready()

    def ready(self):
        """Waits for R's first kernel_info reply (the agent bounds the start)."""
        while True:
            msg_id = self.client.kernel_info()
            try:
                while True:
                    msg = self.client.get_shell_msg(timeout=POLL)
                    if msg.get("parent_header", {}).get("msg_id") == msg_id:
                        break
                break
            except Exception:  # queue.Empty: not yet
                if not self.alive():
                    sys.exit("R exited with status %s before it was ready" % self.proc.returncode)
        # IRkernel's iopub may drop what is sent before a subscriber joins:
        # drain the start's status messages.
        while True:
            try:
                self.client.get_iopub_msg(timeout=0.2)
            except Exception:
                return

    def alive(self):
        return self.proc.poll() is None

    def messages(self, msg_id):
        """The iopub messages of request msg_id, up to its idle status."""
        while True:
            try:
                msg = self.client.get_iopub_msg(timeout=POLL)
            except Exception:  # queue.Empty: nothing yet
                if not self.alive():
                    raise Died()
                continue
            if msg.get("parent_header", {}).get("msg_id") != msg_id:
                continue
            if msg["msg_type"] == "status" and msg["content"].get("execution_state") == "idle":
                return
            yield msg

    def silent(self, code):
        msg_id = self.client.execute(code, silent=True, store_history=False, allow_stdin=False)
        for _ in self.messages(msg_id):
            pass
        self.reply(msg_id)

    def reply(self, msg_id):
        # The shell reply comes with or after idle; reading it keeps the
        # channel's queue from growing.
        while True:
            try:
                msg = self.client.get_shell_msg(timeout=POLL)
            except Exception:
                if not self.alive():
                    raise Died()
                continue
            if msg.get("parent_header", {}).get("msg_id") == msg_id:
                return

    def run(self, code, envs):
        if envs:
            names = ", ".join(rstring(k) for k in envs)
            sets = ", ".join("%s = %s" % (rstring(k), rstring(v)) for k, v in envs.items())
            self.silent("options(lizard.saved.env = Sys.getenv(c(%s), unset = NA, names = TRUE)); "
                        "do.call(Sys.setenv, list(%s))" % (names, sets))
        try:
            msg_id = self.client.execute(code, store_history=True, allow_stdin=False)
            for msg in self.messages(msg_id):
                kind, content = msg["msg_type"], msg["content"]
                if kind == "stream":
                    send(t=content.get("name", "stdout"), text=content.get("text", ""))
                elif kind in ("execute_result", "display_data"):
                    send(t="result" if kind == "execute_result" else "display", data=content.get("data", {}))
                elif kind == "error":
                    send(t="error", name=content.get("ename", ""), value=content.get("evalue", ""),
                         traceback="\n".join(content.get("traceback", [])))
            self.reply(msg_id)
        finally:
            if envs and self.alive():
                self.silent("local({ s <- getOption('lizard.saved.env'); options(lizard.saved.env = NULL); "
                            "for (n in names(s)) if (is.na(s[[n]])) Sys.unsetenv(n) "
                            "else do.call(Sys.setenv, structure(list(s[[n]]), names = n)) })")

    def close(self):
        try:
            self.client.stop_channels()
        finally:
            if self.alive():
                self.proc.kill()
            self.proc.wait()
            shutil.rmtree(self.dir, ignore_errors=True)


def main():
    # SIGINT is for R (the agent signals the whole group); a handler, not
    # SIG_IGN, so that R, which inherits dispositions, still gets it.
    signal.signal(signal.SIGINT, lambda *_: None)
    kernel = Kernel()
    try:
        send(t="ready")
        for line in calls:
            try:
                call = json.loads(line)
            except ValueError:
                continue
            try:
                kernel.run(call.get("code", ""), call.get("envs") or {})
            except Died:
                sys.stderr.write("R exited with status %s\n" % kernel.proc.returncode)
                sys.exit(1)
            send(t="done")
    finally:
        kernel.close()


if __name__ == "__main__":
    main()
