"""Command construction of scripts/kvstore-launch (no process is started).

    python3 -m unittest discover -s tests/launcher
"""

import importlib.machinery
import importlib.util
import io
import os
import tempfile
import unittest
from contextlib import redirect_stderr, redirect_stdout

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts", "kvstore-launch")


def load_launcher():
    loader = importlib.machinery.SourceFileLoader("kvstore_launch", SCRIPT)
    spec = importlib.util.spec_from_loader("kvstore_launch", loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


launch = load_launcher()


def build(argv, environ=None, uid=1000):
    return launch.build_command(launch.parser().parse_args(argv), environ=environ or {}, uid=uid)


def contexts(cmd):
    """Splits an MPMD command into (global options, [app context argv])."""
    first = cmd.index("-np")
    parts, current = [], []
    for word in cmd[first:]:
        if word == ":":
            parts.append(current)
            current = []
        else:
            current.append(word)
    parts.append(current)
    return cmd[:first], parts


def exports(context):
    return [context[i + 1] for i, w in enumerate(context) if w == "-x"]


class LocalLauncher(unittest.TestCase):
    def test_one_mpmd_command_servers_then_workers(self):
        cmd = build(["-n", "2", "-s", "1", "--launcher", "local", "python3", "train.py", "--kv-store", "dist_sync"])
        self.assertEqual(cmd[0], "mpirun")
        self.assertEqual(cmd.count("mpirun"), 1)
        _, ctx = contexts(cmd)
        self.assertEqual(len(ctx), 2)
        server, worker = ctx
        self.assertEqual(server[:2], ["-np", "1"])
        self.assertEqual(worker[:2], ["-np", "2"])
        for c, role in ((server, "server"), (worker, "worker")):
            i = c.index("env")
            self.assertEqual(c[i + 1], "DMLC_ROLE=" + role)
            self.assertEqual(c[-4:], ["python3", "train.py", "--kv-store", "dist_sync"])

    def test_servers_default_to_workers(self):
        _, ctx = contexts(build(["-n", "3", "--launcher", "local", "./a.out"]))
        self.assertEqual([c[1] for c in ctx], ["3", "3"])
        self.assertIn("DMLC_NUM_SERVER=3", exports(ctx[0]))

    def test_zero_servers_has_only_workers(self):
        cmd = build(["-n", "2", "-s", "0", "./a.out"])
        _, ctx = contexts(cmd)
        self.assertNotIn(":", cmd)
        self.assertEqual(len(ctx), 1)
        self.assertIn("DMLC_ROLE=worker", ctx[0])

    def test_every_context_gets_counts_and_one_omp_thread(self):
        _, ctx = contexts(build(["-n", "4", "-s", "2", "./a.out"]))
        for c in ctx:
            self.assertEqual(exports(c)[:3], ["DMLC_NUM_WORKER=4", "DMLC_NUM_SERVER=2", "OMP_NUM_THREADS=1"])

    def test_loopback_and_oversubscription(self):
        opts, _ = contexts(build(["-n", "2", "-s", "1", "./a.out"]))
        self.assertIn("--oversubscribe", opts)
        self.assertEqual(opts[opts.index("--bind-to") + 1], "none")
        self.assertEqual(opts[opts.index("--host") + 1], "localhost:3")
        mca = {opts[i + 1]: opts[i + 2] for i, w in enumerate(opts) if w == "--mca"}
        self.assertEqual(mca["btl_tcp_if_include"], "lo")
        self.assertEqual(mca["oob_tcp_if_include"], "lo")
        self.assertEqual(mca["btl"], "self,vader,tcp")

    def test_root_needs_allow_run_as_root(self):
        self.assertIn("--allow-run-as-root", build(["-n", "1", "./a.out"], uid=0))
        self.assertNotIn("--allow-run-as-root", build(["-n", "1", "./a.out"], uid=1000))

    def test_timeout_goes_to_mpirun(self):
        opts, _ = contexts(build(["-n", "1", "--timeout", "300", "./a.out"]))
        self.assertEqual(opts[opts.index("--timeout") + 1], "300")
        opts, _ = contexts(build(["-n", "1", "./a.out"]))
        self.assertNotIn("--timeout", opts)

    def test_output_dir_goes_to_mpirun_absolute(self):
        opts, _ = contexts(build(["-n", "1", "--output-dir", "logs", "./a.out"]))
        self.assertEqual(opts[opts.index("--output-filename") + 1], os.path.abspath("logs"))
        opts, _ = contexts(build(["-n", "1", "./a.out"]))
        self.assertNotIn("--output-filename", opts)

    def test_env_both_spellings_and_forwarding(self):
        _, ctx = contexts(build(["-n", "1", "-s", "1", "--env", "A:1", "--env", "B=x:y", "--env", "HOME", "./a.out"],
                                environ={"HOME": "/root"}))
        for c in ctx:
            x = exports(c)
            self.assertIn("A=1", x)
            self.assertIn("B=x:y", x)
            self.assertIn("HOME", x)

    def test_user_omp_threads_replaces_default(self):
        _, ctx = contexts(build(["-n", "1", "--env", "OMP_NUM_THREADS:4", "./a.out"]))
        x = exports(ctx[-1])
        self.assertIn("OMP_NUM_THREADS=4", x)
        self.assertNotIn("OMP_NUM_THREADS=1", x)

    def test_library_paths_forwarded_when_set(self):
        env = {"MXNET_LIBRARY_PATH": "/abs/libkvstore.so", "LD_LIBRARY_PATH": "/abs"}
        _, ctx = contexts(build(["-n", "1", "./a.out"], environ=env))
        self.assertIn("MXNET_LIBRARY_PATH", exports(ctx[0]))
        self.assertIn("LD_LIBRARY_PATH", exports(ctx[0]))
        _, ctx = contexts(build(["-n", "1", "./a.out"], environ={}))
        self.assertNotIn("MXNET_LIBRARY_PATH", exports(ctx[0]))

    def test_placement_settings_reach_every_rank_when_set(self):
        env = {"KVSTORE_DIST_BALANCE": "0", "MXNET_KVSTORE_BIGARRAY_BOUND": "1000", "KVSTORE_DIST_CHUNK_BYTES": "4096"}
        _, ctx = contexts(build(["-n", "2", "-s", "2", "./a.out"], environ=env))
        for c in ctx:
            self.assertIn("KVSTORE_DIST_BALANCE", exports(c), "workers must place keys alike")
            self.assertIn("MXNET_KVSTORE_BIGARRAY_BOUND", exports(c))
            self.assertIn("KVSTORE_DIST_CHUNK_BYTES", exports(c), "workers must chunk parts alike")
        _, ctx = contexts(build(["-n", "1", "./a.out"], environ={}))
        self.assertNotIn("KVSTORE_DIST_BALANCE", exports(ctx[0]))

    def test_role_envs_only_in_their_context(self):
        _, (server, worker) = contexts(build(
            ["-n", "1", "-s", "1", "--env-server", "S:1", "--env-worker", "W=2", "./a.out"]))
        self.assertIn("S=1", server)
        self.assertNotIn("W=2", server)
        self.assertIn("W=2", worker)
        self.assertNotIn("S=1", worker)

    def test_command_arguments_that_look_like_flags_stay_with_the_command(self):
        cmd = build(["-n", "1", "-s", "0", "python3", "t.py", "--type", "default_cpu", "-n", "5"])
        self.assertEqual(cmd[-5:], ["t.py", "--type", "default_cpu", "-n", "5"])


class HostfileLaunchers(unittest.TestCase):
    def hostfile(self, text):
        f = tempfile.NamedTemporaryFile("w", suffix=".hosts", delete=False)
        f.write(text)
        f.close()
        self.addCleanup(os.unlink, f.name)
        return f.name

    def test_mpi_passes_the_hostfile(self):
        hf = self.hostfile("node1 slots=2\nnode2\n")
        opts, _ = contexts(build(["-n", "2", "-H", hf, "--launcher", "mpi", "./a.out"]))
        self.assertEqual(opts[opts.index("--hostfile") + 1], hf)
        self.assertNotIn("--oversubscribe", opts)
        self.assertNotIn("lo", opts)

    def test_ssh_reads_launch_py_format(self):
        hf = self.hostfile("# cluster\nnode1:2222 slots=2\n\nnode2:2222\n")
        opts, _ = contexts(build(["-n", "2", "-H", hf, "--launcher", "ssh", "./a.out"]))
        self.assertEqual(opts[opts.index("--host") + 1], "node1:2,node2")
        self.assertEqual(opts[opts.index("--map-by") + 1], "node")
        i = opts.index("plm_rsh_args")
        self.assertEqual(opts[i + 1], "-p 2222")

    def test_hostfile_defaults_to_ssh(self):
        hf = self.hostfile("node1\n")
        opts, _ = contexts(build(["-n", "1", "-H", hf, "./a.out"]))
        self.assertIn("--map-by", opts)
        self.assertNotIn("plm_rsh_args", opts)

    def test_testbed_hostfile_one_process_per_host_servers_first(self):
        # scripts/testbed's hostfile: the job is placed as on a real cluster, one process per
        # host, servers on the first hosts (--map-by node over --host in file order).
        hf = self.hostfile("kvtb1 slots=1\nkvtb2 slots=1\nkvtb3 slots=1\nkvtb4 slots=1\n")
        opts, ctx = contexts(build(["-n", "2", "-s", "2", "-H", hf, "--launcher", "ssh", "./a.out"]))
        self.assertEqual(opts[opts.index("--host") + 1], "kvtb1:1,kvtb2:1,kvtb3:1,kvtb4:1")
        self.assertEqual(opts[opts.index("--map-by") + 1], "node")
        self.assertNotIn("--oversubscribe", opts)
        self.assertNotIn("lo", opts)
        self.assertEqual([(c[1], c[c.index("env") + 1]) for c in ctx],
                         [("2", "DMLC_ROLE=server"), ("2", "DMLC_ROLE=worker")])

    def test_ssh_with_several_ports_is_refused(self):
        hf = self.hostfile("a:22\nb:2222\n")
        with self.assertRaisesRegex(launch.LaunchError, "several ssh ports"):
            build(["-n", "1", "-H", hf, "./a.out"])


class MCAParameters(unittest.TestCase):
    def test_mca_goes_to_mpirun_after_the_launchers_own(self):
        opts, _ = contexts(build(["-n", "1", "--launcher", "local", "--mca", "btl", "self,tcp",
                                  "--mca", "oob_tcp_keepalive_time", "10", "./a.out"]))
        pairs = [(opts[i + 1], opts[i + 2]) for i, w in enumerate(opts) if w == "--mca"]
        self.assertIn(("btl", "self,vader,tcp"), pairs)
        self.assertEqual(pairs[-2:], [("btl", "self,tcp"), ("oob_tcp_keepalive_time", "10")])

    def test_mca_with_a_hostfile(self):
        f = tempfile.NamedTemporaryFile("w", suffix=".hosts", delete=False)
        f.write("kvtb1 slots=1\nkvtb2 slots=1\n")
        f.close()
        self.addCleanup(os.unlink, f.name)
        opts, _ = contexts(build(["-n", "1", "-s", "1", "-H", f.name, "--mca", "btl_tcp_if_include",
                                  "198.18.0.0/24", "./a.out"]))
        i = opts.index("btl_tcp_if_include")
        self.assertEqual(opts[i - 1:i + 2], ["--mca", "btl_tcp_if_include", "198.18.0.0/24"])

    def test_bad_mca_name(self):
        with self.assertRaisesRegex(launch.LaunchError, "MCA parameter name"):
            build(["-n", "1", "--mca", "btl tcp", "x", "./a.out"])


class BadInput(unittest.TestCase):
    def test_ssh_and_mpi_need_a_hostfile(self):
        for launcher in ("ssh", "mpi"):
            with self.assertRaisesRegex(launch.LaunchError, "needs a hostfile"):
                build(["-n", "1", "--launcher", launcher, "./a.out"])

    def test_counts_checked(self):
        with self.assertRaisesRegex(launch.LaunchError, "num-workers"):
            build(["-n", "0", "./a.out"])
        with self.assertRaisesRegex(launch.LaunchError, "num-servers"):
            build(["-n", "1", "-s", "-1", "./a.out"])

    def test_no_command(self):
        with self.assertRaisesRegex(launch.LaunchError, "no command"):
            build(["-n", "1"])

    def test_bad_env(self):
        with self.assertRaisesRegex(launch.LaunchError, "NAME:VALUE"):
            build(["-n", "1", "--env", "1BAD:x", "./a.out"])
        with self.assertRaisesRegex(launch.LaunchError, "not set"):
            build(["-n", "1", "--env", "SURELY_UNSET_VAR", "./a.out"])

    def test_missing_hostfile(self):
        with self.assertRaisesRegex(launch.LaunchError, "cannot read hostfile"):
            build(["-n", "1", "-H", "/nonexistent/hosts", "--launcher", "ssh", "./a.out"])

    def test_main_reports_errors_without_traceback(self):
        err = io.StringIO()
        with redirect_stderr(err):
            rc = launch.main(["-n", "1", "--launcher", "mpi", "./a.out"])
        self.assertEqual(rc, 2)
        self.assertIn("kvstore-launch: error: --launcher mpi needs a hostfile", err.getvalue())

    def test_dry_run_prints_a_shell_command(self):
        out = io.StringIO()
        with redirect_stdout(out):
            rc = launch.main(["-n", "1", "-s", "0", "--dry-run", "python3", "-c", "print('a b')"])
        self.assertEqual(rc, 0)
        self.assertTrue(out.getvalue().startswith("mpirun "))
        self.assertIn("'print('\"'\"'a b'\"'\"')'", out.getvalue())


def mca(cmd):
    """The --mca settings of a command's global options, as a dict."""
    opts, _ = contexts(cmd)
    return {opts[i + 1]: opts[i + 2] for i, w in enumerate(opts) if w == "--mca"}


class NetworkFaults(unittest.TestCase):
    """mpirun's daemons get TCP keepalive settings derived from KVSTORE_DIST_TIMEOUT, so that
    a host cut off for good ends the job in about that time; the timeout reaches every rank."""

    def keepalive(self, cmd):
        m = mca(cmd)
        return tuple(m.get("oob_tcp_keepalive_" + k) for k in ("time", "intvl", "probes"))

    def test_default_timeout_gives_a_minute_of_keepalive(self):
        for launcher in (["--launcher", "local"], ["--launcher", "mpi", "-H", "hosts"]):
            self.assertEqual(self.keepalive(build(["-n", "2"] + launcher + ["./a.out"])), ("54", "2", "3"))

    def test_keepalive_follows_the_timeout_from_env_or_the_environment(self):
        cmd = build(["-n", "2", "--env", "KVSTORE_DIST_TIMEOUT:10", "./a.out"])
        self.assertEqual(self.keepalive(cmd), ("4", "2", "3"))
        cmd = build(["-n", "2", "./a.out"], environ={"KVSTORE_DIST_TIMEOUT": "20"})
        self.assertEqual(self.keepalive(cmd), ("14", "2", "3"))
        _, ctx = contexts(cmd)
        for c in ctx:
            self.assertIn("KVSTORE_DIST_TIMEOUT", exports(c), "every rank must get the launcher's timeout")
        # A short timeout still probes: the first probe after a second.
        self.assertEqual(self.keepalive(build(["-n", "2", "--env", "KVSTORE_DIST_TIMEOUT=2.5", "./a.out"])), ("1", "2", "3"))

    def test_no_timeout_leaves_open_mpi_defaults(self):
        cmd = build(["-n", "2", "--env", "KVSTORE_DIST_TIMEOUT=0", "./a.out"])
        self.assertEqual(self.keepalive(cmd), (None, None, None))

    def test_settings_of_the_user_are_kept(self):
        cmd = build(["-n", "2", "./a.out"], environ={"OMPI_MCA_oob_tcp_keepalive_time": "300"})
        self.assertEqual(self.keepalive(cmd), (None, "2", "3"))

    def test_bad_timeout_is_refused(self):
        with self.assertRaisesRegex(launch.LaunchError, "KVSTORE_DIST_TIMEOUT"):
            build(["-n", "2", "--env", "KVSTORE_DIST_TIMEOUT=soon", "./a.out"])


# What mpirun (Open MPI 4.1) printed when server 1 of a 2-server 2-worker job was killed.
KILLED_OUTPUT = """--------------------------------------------------------------------------
Primary job  terminated normally, but 1 process returned
a non-zero exit code. Per user-direction, the job has been aborted.
--------------------------------------------------------------------------
--------------------------------------------------------------------------
mpirun noticed that process rank 1 with PID 0 on node vm exited on signal 9 (Killed).
--------------------------------------------------------------------------
"""

# Open MPI's report of a daemon lost to keepalive (help-errmgr-base.txt, node-died).
LOST_HOST_OUTPUT = """--------------------------------------------------------------------------
ORTE has lost communication with a remote daemon.

  HNP daemon   : [[1234,0],0] on node launcher
  Remote daemon: [[1234,0],2] on node h3

This is usually due to either a failure of the TCP network
connection to the node, or possibly an internal failure of
the daemon itself. We cannot recover from this failure, and
therefore will terminate the job.
--------------------------------------------------------------------------
"""


class Relay(unittest.TestCase):
    """mpirun's stderr goes through the launcher, which prints one line naming a dead rank or
    a lost host before Open MPI's messages."""

    def relay(self, servers=2):
        written = []
        return launch.Relay(lambda raw: written.append(raw.decode()), servers), written

    def test_a_killed_rank_is_named_first(self):
        relay, written = self.relay()
        relay.feed(b"rank output before\n", 0.0)
        for i, line in enumerate(KILLED_OUTPUT.splitlines(True)):
            relay.feed(line.encode(), 1.0 + i * 0.1)
        self.assertEqual(written, ["rank output before\n"], "Open MPI's block is held until it is complete")
        relay.flush()
        self.assertEqual(written[1], "kvstore-launch: rank 1 (server 1) on host vm was killed by signal 9 (Killed); Open MPI ended the job\n")
        self.assertEqual("".join(written[2:]), KILLED_OUTPUT)

    def test_workers_are_numbered_after_the_servers(self):
        line = launch.diagnose(KILLED_OUTPUT.replace("rank 1 ", "rank 3 ").splitlines(), 2)
        self.assertIn("rank 3 (worker 1) on host vm", line)

    def test_a_lost_host_is_named(self):
        line = launch.diagnose(LOST_HOST_OUTPUT.splitlines(), 1)
        self.assertTrue(line.startswith("kvstore-launch: lost contact with host h3 "), line)
        hung_up = "An MPI communication peer process has unexpectedly disconnected.\n  Peer host:  h2\n"
        self.assertIn("on host h2", launch.diagnose(hung_up.splitlines(), 1))

    def test_a_rank_that_exited_non_zero_is_named(self):
        text = ("mpirun detected that one or more processes exited with non-zero status, thus causing\n"
                "the job to be terminated. The first process to do so was:\n\n"
                "  Process name: [[5260,1],1]\n  Exit code:    3\n")
        self.assertEqual(launch.diagnose(text.splitlines(), 1),
                         "kvstore-launch: rank 1 (worker 0) exited with code 3; Open MPI ended the job")
        self.assertIsNone(launch.diagnose(["WARNING: something harmless"], 1))

    def test_other_messages_pass_unchanged_after_a_quiet_moment(self):
        relay, written = self.relay()
        block = "-" * 74 + "\nWARNING: something harmless\n" + "-" * 74 + "\n"
        for line in block.splitlines(True):
            relay.feed(line.encode(), 5.0)
        relay.tick(5.0 + launch.Relay.QUIET_S / 2)
        self.assertEqual(written, [])
        relay.tick(5.0 + launch.Relay.QUIET_S)
        self.assertEqual("".join(written), block)
        relay.feed(b"later output\n", 9.0)
        self.assertEqual(written[-1], "later output\n")
        # A progress bar's redraws and a line not yet ended pass at once.
        relay.feed(b"\r 50%", 9.1)
        self.assertEqual(written[-1], "\r 50%")


if __name__ == "__main__":
    unittest.main()
