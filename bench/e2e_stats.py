#!/usr/bin/env python3
"""Figures for bench/e2e-vs-slurm.sh.

  e2e_stats.py slurm --base DIR --ids FILE --t0 EPOCH --t1 EPOCH --name NAME --ranks N --gpus G --start batch|step [--array]
      One Slurm phase from its daemons' logs, as a JSON object with the keys
      of gangway's bench e2e phases (ms resolution, unlike jobcomp's 1 s):
        submit  = slurmctld "_slurm_rpc_submit_batch_job: JobId=N" (server receipt;
                  gangway's clock starts earlier, when the client sends)
        placed  = slurmctld "sched: Allocate JobId=N" or backfill "Started JobId=N"
        start   = slurmd "Launching batch job N" (--start batch), or the last
                  "launch task StepId=N.0" over the job's nodes (--start step:
                  every rank's process launched, as gangway measures)
        done    = slurmctld "_job_complete: JobId=N done"
      wall_s is t0 (before the first sbatch) to the last done, as gangway's.
      With --array, FILE holds one array job id (sbatch --array): its tasks
      are the jobcomp records with that ArrayJobId, each submitted when the
      array was, and logged as "JobId=ARRAY_TASK(INTERNAL)".

  e2e_stats.py compare --slurm FILE.jsonl --gangway FILE.json
      The side-by-side table and the ratios.
"""
import argparse, collections, datetime as dt, glob, json, math, re, sys

LINE = re.compile(r'^\[(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?)\] (.*)$')
CTLD = [
    ('submit', re.compile(r'_slurm_rpc_submit_batch_job: JobId=(\d+) ')),
    ('placed', re.compile(r'sched: Allocate JobId=(\d+) ')),
    ('placed', re.compile(r'sched: Allocate JobId=\d+_\d+\((\d+)\) ')),  # array task, by internal id
    ('placed', re.compile(r'Started JobId=(\d+) ')),
    ('placed', re.compile(r'Started JobId=\d+_\d+\((\d+)\) ')),
    ('done', re.compile(r'_job_complete: JobId=(\d+) done')),
    ('done', re.compile(r'_job_complete: JobId=\d+_\d+\((\d+)\) done')),
]
BATCH = re.compile(r'Launching batch job (\d+) for UID')
STEP = re.compile(r'launch task StepId=(\d+)\.0 request')


def ts(s):
    return dt.datetime.fromisoformat(s).timestamp()


def scan(path, patterns, into, keep):
    """into[kind][job] = keep(old, t) for every line of path matching a pattern."""
    with open(path, errors='replace') as f:
        for line in f:
            m = LINE.match(line)
            if not m:
                continue
            for kind, rx in patterns:
                g = rx.search(m.group(2))
                if g:
                    job = g.group(1)
                    t = ts(m.group(1))
                    d = into[kind]
                    d[job] = keep(d.get(job), t)
                    break


def first(old, t):
    return t if old is None else min(old, t)


def last(old, t):
    return t if old is None else max(old, t)


def quantile(xs, p):
    """Nearest rank, as gangway's."""
    if not xs:
        return 0.0
    i = max(0, min(len(xs) - 1, math.ceil(p * len(xs)) - 1))
    return xs[i]


def slurm(a):
    ids = [l.strip() for l in open(a.ids) if l.strip()]
    if not ids:
        sys.exit(f'{a.ids}: no job IDs')
    ev = collections.defaultdict(dict)
    scan(f'{a.base}/log/slurmctld.log', CTLD, ev, first)
    for p in glob.glob(f'{a.base}/log/slurmd.*.log'):
        scan(p, [('batch', BATCH), ('step', STEP)], ev, last)
    comp, tasks = {}, []
    for line in open(f'{a.base}/log/jobcomp.txt', errors='replace'):
        r = dict(re.findall(r'(\w+)=(\S*)', line))
        if 'JobId' in r:
            comp[r['JobId']] = r.get('JobState', '')
            if a.array and r.get('ArrayJobId') == ids[0]:
                tasks.append(r['JobId'])
    if a.array:
        arr = ids[0]
        if arr not in ev['submit']:
            sys.exit(f'array {arr}: no submission in slurmctld.log')
        for t in tasks:  # every task was submitted with the array
            ev['submit'][t] = ev['submit'][arr]
        ids = tasks
    to_start, to_placed, placed_to_start = [], [], []
    ok = failed = 0
    end = None
    for j in ids:
        if comp.get(j) == 'COMPLETED':
            ok += 1
        else:
            failed += 1
        done = ev['done'].get(j)
        if done is not None:
            end = done if end is None else max(end, done)
        sub, pl, st = ev['submit'].get(j), ev['placed'].get(j), ev[a.start].get(j)
        if None in (sub, pl, st):
            continue
        to_start.append((st - sub) * 1e3)
        to_placed.append((pl - sub) * 1e3)
        placed_to_start.append((st - pl) * 1e3)
    for xs in (to_start, to_placed, placed_to_start):
        xs.sort()
    n = len(ids)
    wall = (end - a.t0) if end is not None else 0.0
    out = {
        'name': a.name, 'jobs': n, 'ranks_per_job': a.ranks, 'gpus_per_rank': a.gpus,
        'succeeded': ok, 'failed': failed, 'measured': len(to_start), 'start_event': a.start,
        'submit_s': a.t1 - a.t0, 'submit_per_s': n / (a.t1 - a.t0) if a.t1 > a.t0 else 0.0,
        'wall_s': wall, 'jobs_per_s': ok / wall if wall > 0 else 0.0,
        'submit_to_start_p50_ms': quantile(to_start, .5), 'submit_to_start_p90_ms': quantile(to_start, .9),
        'submit_to_start_p99_ms': quantile(to_start, .99), 'submit_to_start_max_ms': quantile(to_start, 1),
        'submit_to_placed_p50_ms': quantile(to_placed, .5), 'placed_to_start_p50_ms': quantile(placed_to_start, .5),
    }
    if a.profile:
        out['profile'] = a.profile
    print(json.dumps(out))


def compare(a):
    sl = [json.loads(l) for l in open(a.slurm) if l.strip()]
    gw = json.load(open(a.gangway))
    gp = {p['name']: p for p in gw['phases']}
    rows = []
    out = gw.get('output', 'keep')
    print(f"End to end on this machine: {gw['nodes']} nodes × {gw['gpus_per_node']} GPUs, "
          f"{gw['submitters']} submitter, `true` in every rank; ranks' output: Slurm -o /dev/null, "
          f"gangway {'discarded' if out == 'discard' else 'kept in log files'}; "
          f"node daemons (slurmd, gangway agents) and their jobs at nice {gw.get('node_nice', 0)}\n")
    hdr = f"{'phase':<8} {'system':<30} {'jobs':>5} {'ok':>5} {'submit/s':>9} {'wall s':>7} {'jobs/s':>8} " \
          f"{'start p50 ms':>12} {'p99 ms':>9}"
    print(hdr)
    print('-' * len(hdr))
    for name in ('single', 'array', 'gang'):
        g = gp.get(name)
        ss = [s for s in sl if s['name'] == name]
        if not g:
            continue
        for s in ss:
            label = f"Slurm {s.get('profile', '')} ({'last task' if s['start_event'] == 'step' else 'batch'} start)"
            if name == 'array':
                label = f"Slurm {s.get('profile', '')} sbatch --array"
            if name == 'gang':
                label = f"Slurm {s.get('profile', '')} {'srun true' if s['start_event'] == 'step' else '--wrap=true'}"
            print(f"{name:<8} {label:<30} {s['jobs']:>5} {s['succeeded']:>5} {s['submit_per_s']:>9.0f} {s['wall_s']:>7.2f} "
                  f"{s['jobs_per_s']:>8.1f} {s['submit_to_start_p50_ms']:>12.0f} {s['submit_to_start_p99_ms']:>9.0f}")
        print(f"{name:<8} {'gangway':<30} {g['jobs']:>5} {g['succeeded']:>5} {g['submit_per_s']:>9.0f} {g['wall_s']:>7.2f} "
              f"{g['jobs_per_s']:>8.1f} {g['submit_to_start_p50_ms']:>12.0f} {g['submit_to_start_p99_ms']:>9.0f}")
        for s in ss:
            rows.append((name, s, g))
    print('\nRatios, gangway over Slurm (throughput: higher is better for gangway; latency: Slurm ÷ gangway):')
    for name, s, g in rows:
        thr = g['jobs_per_s'] / s['jobs_per_s'] if s['jobs_per_s'] else float('inf')
        p50 = s['submit_to_start_p50_ms'] / g['submit_to_start_p50_ms'] if g['submit_to_start_p50_ms'] else float('inf')
        p99 = s['submit_to_start_p99_ms'] / g['submit_to_start_p99_ms'] if g['submit_to_start_p99_ms'] else float('inf')
        what = 'srun true' if s['start_event'] == 'step' and name == 'gang' else ('--wrap=true' if name == 'gang' else '')
        print(f"  {name:<7} vs Slurm {s.get('profile', ''):<8}{what:<12} throughput {thr:5.2f}×   "
              f"submit→start p50 {p50:5.2f}×   p99 {p99:5.2f}×   (target ≥ 10× throughput)")
    print('\ngangway breakdown, medians in ms (submit→placed, placed→last rank started, last rank exited→job done), '
          'CPU s (server+etcd+client, agents+supervisors+ranks), store writes per job:')
    for name in ('single', 'array', 'gang'):
        g = gp.get(name)
        if g:
            print(f"  {name:<7} {g['submit_to_placed_p50_ms']:8.0f} {g['placed_to_start_p50_ms']:8.0f} "
                  f"{g['exit_to_done_p50_ms']:8.0f}   CPU {g['server_cpu_s']:5.1f} + {g['agents_cpu_s']:5.1f}   "
                  f"writes/job {g.get('store_writes', 0) / max(1, g['jobs']):.1f}")


def summary(a):
    """One line per phase and Slurm variant: each run's throughput ratio and their median."""
    ratios = collections.OrderedDict()
    for d in a.runs:
        sl = [json.loads(l) for l in open(f"{d}/slurm.jsonl") if l.strip()]
        gp = {p['name']: p for p in json.load(open(f"{d}/gangway.json"))['phases']}
        for s in sl:
            g = gp.get(s['name'])
            if not g or not s['jobs_per_s']:
                continue
            what = ('srun true' if s['start_event'] == 'step' else '--wrap=true') if s['name'] == 'gang' else ''
            key = f"{s['name']:<7} vs Slurm {s.get('profile', ''):<8}{what:<12}"
            ratios.setdefault(key, []).append(g['jobs_per_s'] / s['jobs_per_s'])
    print(f"Throughput ratios over {len(a.runs)} runs (gangway jobs/s ÷ Slurm's, same run):")
    for key, rs in ratios.items():
        med = sorted(rs)[len(rs) // 2] if len(rs) % 2 else sum(sorted(rs)[len(rs) // 2 - 1:len(rs) // 2 + 1]) / 2
        print(f"  {key} " + "  ".join(f"{r:5.2f}×" for r in rs) + f"   median {med:5.2f}×   min {min(rs):5.2f}×")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest='cmd', required=True)
    s = sub.add_parser('slurm')
    s.add_argument('--base', required=True)
    s.add_argument('--ids', required=True)
    s.add_argument('--t0', type=float, required=True)
    s.add_argument('--t1', type=float, required=True)
    s.add_argument('--name', required=True)
    s.add_argument('--ranks', type=int, required=True)
    s.add_argument('--gpus', type=int, required=True)
    s.add_argument('--start', choices=['batch', 'step'], required=True)
    s.add_argument('--profile', default='')
    s.add_argument('--array', action='store_true', help='FILE holds one array job id')
    c = sub.add_parser('compare')
    c.add_argument('--slurm', required=True)
    c.add_argument('--gangway', required=True)
    m = sub.add_parser('summary')
    m.add_argument('runs', nargs='+', help='run directories, each with slurm.jsonl and gangway.json')
    a = ap.parse_args()
    {'slurm': slurm, 'compare': compare, 'summary': summary}[a.cmd](a)


if __name__ == '__main__':
    main()
