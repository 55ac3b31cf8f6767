package archtest

import (
	"strings"
	"testing"
)

// Every component package has one exported constructor of the convention
// (docs/architecture.md, "One construction convention").
func TestConstructors(t *testing.T) {
	files, err := ModuleFiles("../..")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range CheckConstructors(files, Components()) {
		t.Error(p)
	}
}

// The check fails on each kind of departure (synthetic sources).
func TestConstructorsViolations(t *testing.T) {
	src := func(pkg, body string) []byte {
		return []byte("package " + pkg + "\n\nimport \"net/http\"\n\nvar _ http.Handler\n\n" + body + "\n")
	}
	const decls = "type Config struct{ N int }\ntype Deps struct{}\ntype Option func(*hooks)\ntype hooks struct{}\ntype Store struct{}\n"
	good := SourceFile{"store/store.go", src("store", decls+"func New(cfg Config, deps Deps, opts ...Option) (*Store, error) { return nil, nil }\n"+
		"type Router struct{}\nfunc NewRouter(n int) *Router { return nil }")}
	for _, tc := range []struct {
		name  string
		files []SourceFile
		want  []string // substrings of the problems, in order; none: clean
	}{
		{"New of the form, a part's constructor, tests ignored", []SourceFile{good,
			{"store/store_test.go", src("store", "type Options struct{}\nfunc Open(o Options) (*Store, error) { return nil, nil }")}}, nil},
		{"the API's handler", []SourceFile{{"store/api.go", src("store", "type Config struct{}\ntype Deps struct{}\ntype Option func()\n"+
			"func New(cfg Config, d Deps, opts ...Option) (http.Handler, error) { return nil, nil }")}}, nil},
		{"the old shapes", []SourceFile{{"store/store.go", src("store", "type Config struct{}\ntype Store struct{}\ntype Options struct{ Config Config }\n"+
			"func New(pool, bucket any, opts Options) (*Store, error) { return nil, nil }\n"+
			"func NewFromConfig(cfg Config) (*Store, error) { return nil, nil }")}},
			[]string{"store: declares an exported type Options", "store: declares no type Deps", "store: declares no type Option",
				"store: store/store.go:10: New must be New(cfg Config, deps Deps, opts ...Option) (*T, error)",
				"store: store/store.go:11: NewFromConfig is a second constructor of *Store"}},
		{"Open instead of New", []SourceFile{{"store/store.go", src("store", decls+"func Open(cfg Config, deps Deps, opts ...Option) (*Store, error) { return nil, nil }")}},
			[]string{"store: exports no constructor New"}},
		{"settings as functional options", []SourceFile{{"store/store.go", src("store", decls+"func New(cfg Config, deps Deps, opts ...func(*Config)) (*Store, error) { return nil, nil }")}},
			[]string{"New must be New(cfg Config, deps Deps, opts ...Option)"}},
		{"no error", []SourceFile{{"store/store.go", src("store", decls+"func New(cfg Config, deps Deps, opts ...Option) *Store { return nil }")}},
			[]string{"New must be"}},
		{"a second exported constructor of the component", []SourceFile{good, {"store/open.go", src("store", "func OpenStore(cfg Config) (*Store, error) { return nil, nil }")}},
			[]string{"store: store/open.go:7: OpenStore is a second constructor of *Store: build it with New"}},
		{"a second handler constructor", []SourceFile{{"store/api.go", src("store", "type Config struct{}\ntype Deps struct{}\ntype Option func()\n"+
			"func New(cfg Config, d Deps, opts ...Option) (http.Handler, error) { return nil, nil }\nfunc NewHandler() (http.Handler, error) { return nil, nil }")}},
			[]string{"NewHandler is a second constructor of http.Handler"}},
		{"a component that is not there", nil, []string{"store: no Go files"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := CheckConstructors(tc.files, []string{"store"})
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
