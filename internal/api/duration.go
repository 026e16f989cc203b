package api

import (
	"encoding/json"
	"fmt"
	"time"
)

// Duration is a time.Duration that travels as a Go duration string ("90s",
// "5m") in JSON and YAML, so specs stay readable. A bare number is taken as
// seconds.
type Duration time.Duration

// D returns the value as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// MarshalJSON writes the duration as a string such as "1m30s".
func (d Duration) MarshalJSON() ([]byte, error) {
	return json.Marshal(time.Duration(d).String())
}

// UnmarshalJSON accepts "1m30s" or a number of seconds.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		v, err := time.ParseDuration(s)
		if err != nil {
			return fmt.Errorf("invalid duration %q (want e.g. \"30s\", \"5m\")", s)
		}
		*d = Duration(v)
		return nil
	}
	var f float64
	if err := json.Unmarshal(b, &f); err != nil {
		return fmt.Errorf("invalid duration %s (want e.g. \"30s\")", b)
	}
	*d = Duration(f * float64(time.Second))
	return nil
}
