"""Tests of gangway_client against a live server.

They need one: GANGWAY_SERVER, GANGWAY_TOKEN (an admin's) and
GANGWAY_CA_FILE name it. The Go test TestPythonClient in
internal/controlplane/server starts one in-process and runs these with
/usr/bin/python3 -m unittest; without GANGWAY_SERVER they are skipped.
"""

import os
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from gangway_client import Client, GangwayError  # noqa: E402

LIVE = bool(os.environ.get("GANGWAY_SERVER"))


@unittest.skipUnless(LIVE, "no live server: set GANGWAY_SERVER, GANGWAY_TOKEN and GANGWAY_CA_FILE")
class ClientTest(unittest.TestCase):
    def setUp(self):
        self.c = Client()
        self.addCleanup(self.c.close)

    def test_health_and_openapi(self):
        self.assertTrue(self.c.health()["ok"])
        doc = self.c.openapi()
        self.assertEqual(doc["openapi"][:2], "3.")
        self.assertIn("post", doc["paths"]["/v1/jobs"])
        self.assertIn("JobSpec", doc["components"]["schemas"])
        # Every route this client calls is in the document.
        for path, method in [("/v1/jobs", "post"), ("/v1/jobs", "get"), ("/v1/jobs/{id}", "get"),
                             ("/v1/jobs/{id}/cancel", "post"), ("/v1/jobs/{id}/logs", "get"),
                             ("/v1/jobs/{id}/requeue", "post"), ("/v1/jobs/{id}/signal", "post"),
                             ("/v1/jobs/{id}/hold", "post"), ("/v1/jobs/{id}/release", "post"),
                             ("/v1/nodes", "get"), ("/v1/nodes/{name}", "get"), ("/v1/queues", "get"),
                             ("/v1/whoami", "get"), ("/healthz", "get"), ("/openapi.json", "get")]:
            self.assertIn(method, doc["paths"].get(path, {}), "%s %s is not in /openapi.json" % (method, path))

    def test_whoami(self):
        self.assertTrue(self.c.whoami()["name"])

    def test_submit_dict_then_read_list_and_cancel(self):
        job = self.c.submit({"name": "py-dict", "ranks": 1, "command": ["sleep", "1000"]})
        self.assertTrue(job["id"])
        self.assertEqual(job["spec"]["name"], "py-dict")
        detail = self.c.job(job["id"])
        self.assertEqual(detail["job"]["id"], job["id"])
        self.assertIn(job["id"], [j["id"] for j in self.c.jobs()])
        self.assertIn(job["id"], [j["id"] for j in self.c.jobs(live=True, limit=50)])
        cancelled = self.c.cancel(job["id"])
        self.assertTrue(cancelled["status"].get("cancelRequested"))

    def test_submit_yaml_text(self):
        job = self.c.submit("name: py-yaml\nranks: 1\ncommand: [sleep, '1000']\n")
        self.assertEqual(job["spec"]["name"], "py-yaml")
        self.c.cancel(job["id"])

    def test_same_idempotency_key_submits_once(self):
        spec = {"name": "py-once", "ranks": 1, "command": ["true"]}
        a = self.c.submit(spec, idempotency_key="py-once-1")
        b = self.c.submit(spec, idempotency_key="py-once-1")
        self.assertEqual(a["id"], b["id"])

    def test_bad_spec_names_its_field(self):
        with self.assertRaises(GangwayError) as cm:
            self.c.submit("ranks: 1\ncommand: [true]\nrankz: 2\n")
        e = cm.exception
        self.assertIn(e.status, (400, 422))
        self.assertIn("rankz", e.message)
        self.assertTrue(e.fields, "the error names no field: %s" % e.message)

    def test_missing_job_is_404_with_message(self):
        with self.assertRaises(GangwayError) as cm:
            self.c.job("no-such-job")
        self.assertEqual(cm.exception.status, 404)
        self.assertIn("no-such-job", cm.exception.message)

    def test_logs_of_a_job_not_started(self):
        job = self.c.submit({"ranks": 1, "command": ["true"]})
        with self.assertRaises(GangwayError) as cm:
            self.c.logs(job["id"], rank=0)
        self.assertEqual(cm.exception.status, 409)
        self.assertIn("not started", cm.exception.message)

    def test_hold_and_release(self):
        job = self.c.submit({"ranks": 1, "command": ["sleep", "1000"]})
        self.addCleanup(self.c.cancel, job["id"])
        self.assertTrue(self.c.hold(job["id"])["status"].get("held"))
        self.assertTrue(self.c.job(job["id"])["job"]["status"].get("held"))
        self.assertFalse(self.c.release(job["id"])["status"].get("held"))

    def test_requeue_and_signal_need_a_running_job(self):
        # The test server has no nodes: the job waits, and both calls are
        # refused with the server's reason.
        job = self.c.submit({"ranks": 1, "command": ["sleep", "1000"]})
        self.addCleanup(self.c.cancel, job["id"])
        with self.assertRaises(GangwayError) as cm:
            self.c.requeue(job["id"])
        self.assertEqual(cm.exception.status, 409)
        self.assertIn("only a running job can be requeued", cm.exception.message)
        with self.assertRaises(GangwayError) as cm:
            self.c.signal(job["id"], "USR1")
        self.assertEqual(cm.exception.status, 409)
        self.assertIn("only a running job's ranks can be signalled", cm.exception.message)
        with self.assertRaises(GangwayError) as cm:
            self.c.signal(job["id"], "KILL")
        self.assertEqual(cm.exception.status, 400)
        self.assertEqual(cm.exception.field, "signal")

    def test_logs_options_reach_the_server(self):
        job = self.c.submit({"ranks": 1, "command": ["true"]})
        with self.assertRaises(GangwayError) as cm:
            self.c.logs(job["id"], since="yesterday")
        self.assertEqual(cm.exception.status, 400)
        self.assertIn("since", cm.exception.message)

    def test_nodes_and_queues(self):
        self.assertIsInstance(self.c.nodes(), list)
        self.assertIsInstance(self.c.queues(), list)

    def test_no_token_is_401(self):
        with Client(token="") as anon, self.assertRaises(GangwayError) as cm:
            anon.jobs()
        self.assertEqual(cm.exception.status, 401)
        self.assertTrue(cm.exception.message)


class OfflineTest(unittest.TestCase):
    def test_needs_a_server(self):
        saved = os.environ.pop("GANGWAY_SERVER", None)
        try:
            with self.assertRaises(ValueError):
                Client()
        finally:
            if saved is not None:
                os.environ["GANGWAY_SERVER"] = saved

    def test_error_field(self):
        e = GangwayError(422, "bad", [{"message": "x"}, {"field": "ranks", "message": "y"}])
        self.assertEqual(e.field, "ranks")
        self.assertEqual(str(e), "422: bad")
        self.assertIsNone(GangwayError(500, "boom").field)


if __name__ == "__main__":
    unittest.main()
