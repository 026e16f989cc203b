package store

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gangway/gangway/internal/api"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// bigAttempt is a job running attempt 1 of n ranks over nodes of 8, each
// assignment carrying an environment of env bytes.
func bigAttempt(t *testing.T, s *Store, n, env int) (*api.Job, []api.Assignment) {
	t.Helper()
	j, err := s.CreateJob(context.Background(), spec(n), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	j.Status.Phase = api.JobRunning
	j.Status.Attempts = []api.Attempt{{Number: 1, Phase: api.AttemptRunning}}
	asg := make([]api.Assignment, n)
	for i := range asg {
		asg[i] = api.Assignment{JobID: j.ID, Attempt: 1, Rank: i, Node: "n" + string(rune('a'+i/8%26)),
			Command: []string{"python3", "train.py"}, Env: map[string]string{"E": strings.Repeat("v", env)}}
	}
	return j, asg
}

func TestGangOf1024RanksFitsOneTransaction(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	// etcd's defaults (128 operations, 1.5 MiB) would refuse both.
	for _, n := range []int{128, 1024} {
		j, asg := bigAttempt(t, s, n, 1500)
		rev, err := s.StartAttempt(ctx, j, asg)
		if err != nil {
			t.Fatalf("%d ranks: %v", n, err)
		}
		l, err := s.Assignments(ctx, "na")
		if err != nil || l.Revision < rev {
			t.Fatalf("assignments after %d ranks: %v", n, err)
		}
	}
}

func TestOverLimitTransactionSaysWhichFlags(t *testing.T) {
	s := newStore(t)
	// A transaction past even the raised limit gets ErrTooLarge, whose
	// text names the etcd flags to raise.
	ops := make([]clientv3.Op, MaxTxnOps+1)
	for i := range ops {
		ops[i] = clientv3.OpPut("/x/"+strconv.Itoa(i), "v")
	}
	j, err := s.CreateJob(context.Background(), spec(1), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.commitOne(context.Background(), JobWrite{job: j, ops: ops})
	if !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "--max-txn-ops") {
		t.Fatalf("err = %v; want ErrTooLarge naming --max-txn-ops", err)
	}
}
