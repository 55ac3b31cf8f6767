package config_test

import (
	"fmt"
	"testing"

	"github.com/sluicehq/sluice/shared/config"
)

type inner struct {
	Host  string        `env:"T_HOST,required"`
	Token config.Secret `env:"T_TOKEN" file:"true"`
}

type outer struct {
	First  string `env:"T_FIRST"`
	Server inner  `section:"Server"`
	hidden inner  // unexported: not a section
	Deeper struct {
		Nested inner
		Last   int `env:"T_LAST"`
	} `section:"Deeper"`
}

// Vars (the reference) and Settings (`config show`) list the same
// variables in the same order, nested sections included: Settings reads
// each one's value from its own field, however deep.
func TestVarsAndSettingsAgree(t *testing.T) {
	var c outer
	c.First, c.Server.Host, c.Server.Token = "f", "server-host", "tok"
	c.hidden.Host = "hidden"
	c.Deeper.Nested.Host, c.Deeper.Last = "nested-host", 7

	var vars []string
	for _, v := range config.Vars(&c) {
		vars = append(vars, v.Section+"/"+v.Key)
	}
	wantVars := "[/T_FIRST Server/T_HOST Server/T_TOKEN Server/T_TOKEN_FILE Deeper/T_HOST Deeper/T_TOKEN Deeper/T_TOKEN_FILE Deeper/T_LAST]"
	if got := fmt.Sprint(vars); got != wantVars {
		t.Errorf("Vars: %s\nwant   %s", got, wantVars)
	}

	var settings []string
	for _, s := range config.Settings(c) {
		settings = append(settings, s.Key+"="+s.Value)
	}
	wantSettings := "[T_FIRST=f T_HOST=server-host T_TOKEN=[redacted] T_HOST=nested-host T_TOKEN= T_LAST=7]"
	if got := fmt.Sprint(settings); got != wantSettings {
		t.Errorf("Settings: %s\nwant       %s", got, wantSettings)
	}
}
