package replication

import (
	"reflect"
	"testing"
	"time"
)

// A zero Config takes every tuning default from DefaultConfig, and a
// negative redelivery backoff means none.
func TestSetDefaultsTakesDefaultConfig(t *testing.T) {
	var c Config
	c.setDefaults()
	if c.Logger == nil || c.Clock == nil {
		t.Fatal("no default logger or clock")
	}
	c.Logger, c.Clock = nil, nil
	if want := DefaultConfig(); !reflect.DeepEqual(c, want) {
		t.Fatalf("zero config with defaults:\n%+v\nwant\n%+v", c, want)
	}
	c = Config{RedeliveryBackoff: -time.Second, MaxTopics: 7}
	c.setDefaults()
	if c.RedeliveryBackoff != 0 || c.MaxTopics != 7 {
		t.Fatalf("backoff %v, max topics %d; want 0 and the 7 given", c.RedeliveryBackoff, c.MaxTopics)
	}
}
