package config_test

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/shared/config"
)

type section struct {
	Name     string        `env:"T_NAME" envDefault:"default"`
	Lookback time.Duration `env:"T_LOOKBACK" envDefault:"600"`
	Wait     time.Duration `env:"T_WAIT" envDefault:"2ms"`
	Interval time.Duration `env:"T_INTERVAL" envDefault:"30"`
	Count    int           `env:"T_COUNT" envDefault:"16"`
	Brokers  []string      `env:"T_BROKERS" envDefault:"a:1,b:2" envSeparator:","`
	Key      string        `env:"T_KEY"`
	Secret   config.Secret `env:"T_SECRET" envDefault:"s"`
}

// Defaults reads the tags, as Parse does with nothing set.
func TestDefaults(t *testing.T) {
	var got section
	config.Defaults(&got)
	var parsed section
	if err := config.Parse(&parsed, map[string]string{}); err != nil {
		t.Fatal(err)
	}
	want := section{Name: "default", Lookback: 600 * time.Second, Wait: 2 * time.Millisecond, Interval: 30 * time.Second,
		Count: 16, Brokers: []string{"a:1", "b:2"}, Secret: "s"}
	for _, c := range []section{got, parsed} {
		if c.Name != want.Name || c.Lookback != want.Lookback || c.Wait != want.Wait || c.Interval != want.Interval ||
			c.Count != want.Count || len(c.Brokers) != 2 || c.Brokers[1] != "b:2" || c.Key != "" || c.Secret != want.Secret {
			t.Errorf("got %+v, want %+v", c, want)
		}
	}
}

// FillZero fills the zero fields only, and not those it is told to keep.
func TestFillZero(t *testing.T) {
	c := section{Name: "mine", Count: 3, Key: "k"}
	config.FillZero(&c, "T_INTERVAL")
	if c.Name != "mine" || c.Count != 3 || c.Key != "k" {
		t.Errorf("set fields changed: %+v", c)
	}
	if c.Lookback != 600*time.Second || c.Wait != 2*time.Millisecond || len(c.Brokers) != 2 || c.Secret != "s" {
		t.Errorf("zero fields not filled: %+v", c)
	}
	if c.Interval != 0 {
		t.Errorf("Interval = %s, want the kept 0", c.Interval)
	}
}

// A nested section is filled too.
func TestFillZeroNested(t *testing.T) {
	var c struct {
		Inner section
		Other int
	}
	config.FillZero(&c)
	if c.Inner.Count != 16 || c.Other != 0 {
		t.Errorf("got %+v", c)
	}
}
