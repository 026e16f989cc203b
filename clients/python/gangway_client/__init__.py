"""A small client for gangway's HTTP API (/v1), written from the OpenAPI
document the server answers at /openapi.json.

    from gangway_client import Client, GangwayError

    c = Client("https://head:8443", token="gw_...", ca_file="ca.crt")
    job = c.submit({"name": "hello", "ranks": 2, "command": ["hostname"]})
    print(c.job(job["id"])["job"]["status"]["phase"])

Answers are the server's JSON as dicts and lists (the schemas are in the
OpenAPI document's components). A request the server refuses raises
GangwayError with the server's message and, for bad input, the fields at
fault. It needs requests and nothing else.
"""

import json
import os
import uuid

import requests

__all__ = ["Client", "GangwayError"]


class GangwayError(Exception):
    """The server refused a request.

    status is the HTTP status; message the server's error; fields the
    fields at fault (a list of dicts with "field" and "message", and
    "line" and "column" for a spec), empty when it named none; field the
    first one's name, or None.
    """

    def __init__(self, status, message, fields=None):
        super().__init__("%d: %s" % (status, message))
        self.status = status
        self.message = message
        self.fields = list(fields or [])

    @property
    def field(self):
        for f in self.fields:
            if f.get("field"):
                return f["field"]
        return None


class Client:
    """Calls one gangway server.

    server, token and ca_file default to $GANGWAY_SERVER, $GANGWAY_TOKEN
    and $GANGWAY_CA_FILE. ca_file is the cluster CA's PEM file (the
    server's certificate is signed by it); None trusts the system's CAs.
    timeout is in seconds, per request.
    """

    def __init__(self, server=None, token=None, ca_file=None, timeout=30, session=None):
        server = server or os.environ.get("GANGWAY_SERVER")
        if not server:
            raise ValueError("no server: pass server= or set GANGWAY_SERVER")
        self.server = server.rstrip("/")
        self.token = token if token is not None else os.environ.get("GANGWAY_TOKEN")
        ca_file = ca_file or os.environ.get("GANGWAY_CA_FILE")
        self.verify = ca_file if ca_file else True
        self.timeout = timeout
        self.session = session or requests.Session()

    def close(self):
        """Closes the connections the client keeps open."""
        self.session.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    @classmethod
    def from_config(cls, path=None, context=None, **kw):
        """A client for a context of the gangway CLI's config file
        ($GANGWAY_CONFIG, else ~/.config/gangway/config.yaml, or the
        older ~/.config/gangway/config while there is no config.yaml); the
        current context when context is None. Needs PyYAML."""
        import yaml  # only here: the rest of the client does without

        if path is None:
            path = os.environ.get("GANGWAY_CONFIG")
        if path is None:
            d = os.path.join(os.environ.get("XDG_CONFIG_HOME") or os.path.expanduser("~/.config"), "gangway")
            path = os.path.join(d, "config.yaml")
            if not os.path.exists(path) and os.path.isfile(os.path.join(d, "config")):
                path = os.path.join(d, "config")
        with open(path) as f:
            cfg = yaml.safe_load(f) or {}
        name = context or cfg.get("current-context")
        for c in cfg.get("contexts") or []:
            if c.get("name") == name:
                token = c.get("token")
                if c.get("token-file"):
                    with open(c["token-file"]) as tf:
                        token = tf.read().strip()
                return cls(c["server"], token=token, ca_file=c.get("ca-file"), **kw)
        raise ValueError("no context %r in %s" % (name, path))

    # Jobs.

    def submit(self, spec, idempotency_key=None):
        """Submits a job: spec is a dict (sent as JSON) or a spec's YAML or
        JSON text. Returns the job (for an array spec, the array's
        submission: arrayId, count). A fresh idempotency key is sent
        unless one is given, so a retried call submits once."""
        if isinstance(spec, (dict, list)):
            body, ctype = json.dumps(spec).encode(), "application/json"
        else:
            body = spec.encode() if isinstance(spec, str) else spec
            ctype = "application/yaml"
        headers = {"Content-Type": ctype, "Idempotency-Key": idempotency_key or str(uuid.uuid4())}
        return self._call("POST", "/v1/jobs", data=body, headers=headers)

    def job(self, job_id):
        """A job's detail: {"job": ..., and its attempts' ranks, checkpoints
        and progress}."""
        return self._call("GET", "/v1/jobs/" + _seg(job_id))

    def jobs(self, live=False, all=False, since=None, limit=None, user=None):
        """Lists jobs (a list of job dicts), oldest first; with all, newest
        first and with the archived ones. since is a duration ago ("7d")
        or a time."""
        params = {}
        if live:
            params["live"] = "true"
        if all:
            params["all"] = "true"
        if since is not None:
            params["since"] = since
        if limit is not None:
            params["limit"] = str(limit)
        if user is not None:
            params["user"] = user
        return self._call("GET", "/v1/jobs", params=params)["jobs"]

    def cancel(self, job_id):
        """Asks for a job's cancellation; returns the job."""
        return self._call("POST", "/v1/jobs/" + _seg(job_id) + "/cancel")

    def requeue(self, job_id):
        """Requeues a running job, as Slurm's scontrol requeue: its ranks
        get the checkpoint signal, the attempt stops and the job waits
        again under its ID. Returns the job; a job that is not running is
        refused (409)."""
        return self._call("POST", "/v1/jobs/" + _seg(job_id) + "/requeue")

    def signal(self, job_id, sig):
        """Sends a signal to every rank of a running job, which runs on,
        as scancel --signal: "HUP", "INT", "USR1", "USR2" or "TERM" (with
        or without SIG) or their numbers. Returns the job."""
        return self._call("POST", "/v1/jobs/" + _seg(job_id) + "/signal", params={"signal": str(sig)})

    def hold(self, job_id):
        """Holds a waiting job: nothing places it until release. Returns
        the job."""
        return self._call("POST", "/v1/jobs/" + _seg(job_id) + "/hold")

    def release(self, job_id):
        """Releases a held job. Returns the job."""
        return self._call("POST", "/v1/jobs/" + _seg(job_id) + "/release")

    def logs(self, job_id, rank=0, attempt=None, stream=None, tail=None, since=None, timestamps=False):
        """One rank's log of a job (the newest attempt unless attempt, from
        1), as text. stream is "stdout", "stderr" or "both"; tail keeps the
        last lines only; since keeps the lines written since then (a
        duration ago, "10m", or an RFC 3339 time); timestamps puts the
        time each line was written before it."""
        params = {"rank": str(rank)}
        if attempt is not None:
            params["attempt"] = str(attempt)
        if stream is not None:
            params["stream"] = stream
        if tail is not None:
            params["tail"] = str(tail)
        if since is not None:
            params["since"] = since
        if timestamps:
            params["timestamps"] = "true"
        return self._call("GET", "/v1/jobs/" + _seg(job_id) + "/logs", params=params, text=True)

    # The cluster.

    def nodes(self):
        """Lists nodes (a list of node dicts)."""
        return self._call("GET", "/v1/nodes")["nodes"]

    def node(self, name):
        return self._call("GET", "/v1/nodes/" + _seg(name))

    def queues(self):
        """Lists queues (a list of queue dicts, with their use)."""
        return self._call("GET", "/v1/queues")["queues"]

    def whoami(self):
        return self._call("GET", "/v1/whoami")

    def health(self):
        return self._call("GET", "/healthz")

    def openapi(self):
        """The server's OpenAPI document."""
        return self._call("GET", "/openapi.json")

    def _call(self, method, path, params=None, data=None, headers=None, text=False):
        h = dict(headers or {})
        if self.token:
            h["Authorization"] = "Bearer " + self.token
        resp = self.session.request(method, self.server + path, params=params, data=data, headers=h,
                                    verify=self.verify, timeout=self.timeout)
        if resp.status_code >= 400:
            try:
                body = resp.json()
                message, fields = body.get("error") or resp.reason, body.get("fields")
            except ValueError:
                message, fields = resp.text.strip() or resp.reason, None
            raise GangwayError(resp.status_code, message, fields)
        if text:
            return resp.text
        return resp.json()


def _seg(s):
    """s as one path segment."""
    return requests.utils.quote(str(s), safe="")
