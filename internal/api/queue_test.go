package api

import (
	"strings"
	"testing"
	"time"
)

// TestQueueSettingsValidate: policy settings in range pass for the
// policies that use them; errors name the field, the value and the range,
// or the policies that use the field.
func TestQueueSettingsValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		q    QueueSpec
		want []string // substrings of the error; none: valid
	}{
		{"lane settings", QueueSpec{Policy: "gangway", LaneShare: 0.3, OverdueAfter: Duration(2 * time.Hour), LevelBase: Duration(time.Hour), MinRun: Duration(time.Minute)}, nil},
		{"las bound", QueueSpec{Policy: "las", OverdueAfter: Duration(time.Hour), MinRun: Duration(5 * time.Minute)}, nil},
		{"share too big", QueueSpec{Policy: "gangway", LaneShare: 1.5}, []string{"laneShare", "1.5", "(0, 1]"}},
		{"share negative", QueueSpec{Policy: "gangway", LaneShare: -0.1}, []string{"laneShare", "-0.1"}},
		{"overdue too short", QueueSpec{Policy: "gangway", OverdueAfter: Duration(time.Millisecond)}, []string{"overdueAfter", "1ms", "from 1s to 2160h0m0s"}},
		{"min run too long", QueueSpec{Policy: "las", MinRun: Duration(48 * time.Hour)}, []string{"minRun", "48h0m0s", "24h0m0s"}},
		{"level base negative", QueueSpec{Policy: "gangway", LevelBase: Duration(-time.Second)}, []string{"levelBase", "-1s"}},
		{"share with backfill", QueueSpec{Policy: "backfill", LaneShare: 0.3}, []string{"laneShare", "0.3", "policy backfill does not use it", "used by gangway"}},
		{"share with las", QueueSpec{Policy: "las", LaneShare: 0.3}, []string{"laneShare", "policy las does not use it", "it takes overdueAfter, levelBase, minRun"}},
		{"min run with fifo", QueueSpec{Policy: "fifo", MinRun: Duration(time.Minute)}, []string{"minRun", "1m0s", "policy fifo", "used by gangway, gangway-4h, las"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := tc.q
			q.Name = "q"
			q.Default()
			err := q.Validate()
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("Validate = %v; want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate = nil; want an error naming %q", tc.want)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Validate = %v; want it to name %q", err, w)
				}
			}
		})
	}
	if _, err := DecodeQueueSpec([]byte(`{"name": "q", "policy": "gangway", "laneShare": 0.3, "overdueAfter": "2h", "levelBase": "30m", "minRun": 5}`)); err != nil {
		t.Errorf("decode: %v", err)
	}
}
