package archtest

import (
	"strings"
	"testing"
)

// Every setting is declared once, in the package it configures
// (docs/architecture.md, "How a component declares its settings").
func TestConfigSections(t *testing.T) {
	files, err := ConfigFiles("../..")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 100 {
		t.Fatalf("found %d .go files: not the module", len(files))
	}
	for _, p := range CheckConfig(files) {
		t.Error(p)
	}
}

// The check fails on each kind of violation (synthetic sources).
func TestConfigSectionsViolations(t *testing.T) {
	src := func(pkg, body string) []byte {
		return []byte("package " + pkg + "\n\nimport \"time\"\n\nvar _ time.Duration\n\n" + body + "\n")
	}
	relay := SourceFile{"relay/config.go", src("relay", "type Config struct {\n"+
		"\tBatchSize int `env:\"EVENT_PUBLISHER_BATCH_SIZE\" envDefault:\"200\"`\n"+
		"\tLookback time.Duration `env:\"EVENT_PUBLISHER_LOOKBACK_SECONDS\" envDefault:\"600\"`\n"+
		"\tName string `env:\"EVENT_PUBLISHER_NAME\" envDefault:\"default\"`\n"+
		"\tMetricsLogInterval time.Duration `env:\"EVENT_PUBLISHER_METRICS_LOG_INTERVAL_SECONDS\" envDefault:\"30\"`\n}")}
	s3 := SourceFile{"eventstore/config.go", src("eventstore", "type Config struct {\n\tS3Region string `env:\"EVENT_STORE_S3_REGION\" envDefault:\"us-east-1\"`\n}")}
	for _, tc := range []struct {
		name  string
		files []SourceFile
		want  []string // substrings of the problems, in order; none: clean
	}{
		{"sections in their packages, read through the tags", []SourceFile{relay, s3,
			{"relay/options.go", src("relay", "func f(c *Config) {\n\tconfig.FillZero(c)\n\tc.BatchSize = 100\n\tc.MetricsLogInterval = 0\n}")}}, nil},
		{"a section in the mechanism", []SourceFile{
			{"shared/config/sections.go", src("config", "// Relay configures the relay.\ntype Relay struct {\n\tName string `env:\"EVENT_PUBLISHER_NAME\"`\n}")}},
			[]string{"shared/config/sections.go:8: section Relay is declared in shared/config, which is only the mechanism"}},
		{"a variable declared twice", []SourceFile{relay,
			{"shared/kafka/config.go", src("kafka", "type Config struct {\n\tBatch int `env:\"EVENT_PUBLISHER_BATCH_SIZE\"`\n}")}},
			[]string{"shared/kafka/config.go:8: EVENT_PUBLISHER_BATCH_SIZE is declared twice"}},
		{"a default restated as a literal", []SourceFile{relay,
			{"relay/options.go", src("relay", "func f(c *Config) {\n\tif c.BatchSize <= 0 {\n\t\tc.BatchSize = 200\n\t}\n\tif c.Lookback <= 0 {\n\t\tc.Lookback = 600 * time.Second\n\t}\n\tif c.Name == \"\" {\n\t\tc.Name = \"default\"\n\t}\n}")}},
			[]string{"relay/options.go:12: the default of EVENT_PUBLISHER_LOOKBACK_SECONDS (600000000000",
				"relay/options.go:15: the default of EVENT_PUBLISHER_NAME (\"default\"",
				"relay/options.go:9: the default of EVENT_PUBLISHER_BATCH_SIZE (200"}},
		{"a default restated through a constant of another package", []SourceFile{s3,
			{"eventstore/objstore/s3store/s3store.go", src("s3store", "const DefaultRegion = \"us-east-1\"\n\nfunc f(o *Options) { o.Region = DefaultRegion }")},
			{"shared/other/x.go", src("other", "var o = Options{MaxBatch: 200, Lookback: 10 * time.Minute}")}},
			[]string{"s3store.go:9: the default of EVENT_STORE_S3_REGION (\"us-east-1\""}},
		{"an equal value that says it is another knob's", []SourceFile{relay,
			{"relay/reindex.go", src("relay", "var o = Options{BatchSize: 200} // the reindex page, not the default of EVENT_PUBLISHER_BATCH_SIZE")}}, nil},
		{"through a named constant and a shift", []SourceFile{relay,
			{"relay/defaults.go", src("relay", "const (\n\tminute = 60 * time.Second\n\tdefaultLookback = 10 * minute\n\tbatch = 25 << 3\n)\n\nvar d = Config{Lookback: defaultLookback, BatchSize: batch}")}},
			[]string{"relay/defaults.go:13: the default of EVENT_PUBLISHER_BATCH_SIZE", "relay/defaults.go:13: the default of EVENT_PUBLISHER_LOOKBACK_SECONDS"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := CheckConfig(tc.files)
			if len(got) != len(tc.want) {
				t.Fatalf("got %d problems %v, want %d %v", len(got), got, len(tc.want), tc.want)
			}
			for i, p := range got {
				if !strings.Contains(p.String(), tc.want[i]) {
					t.Errorf("problem %d = %q, want it to contain %q", i, p, tc.want[i])
				}
			}
		})
	}
}
