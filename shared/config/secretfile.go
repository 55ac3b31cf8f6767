package config

import (
	"errors"
	"io/fs"
	"maps"
	"os"
	"strings"
)

// fileSuffix turns a credential's variable into the one naming its file.
const fileSuffix = "_FILE"

// ReadSecretFiles returns environ with every credential of vars given as a
// file resolved: for each variable declared with file:"true" (DATABASE_URL, the
// S3 keys, Kafka SASL, the Elasticsearch user, password and API key,
// SLUICE_API_TOKENS), NAME_FILE names a file whose content, trailing
// newlines dropped, becomes NAME — the form Kubernetes and Docker mount
// secrets in, which keeps them out of the process environment of anything
// that only reads env. It refuses, naming both variables, NAME and NAME_FILE
// set together (which one wins would be a guess), and names NAME_FILE when
// the file cannot be read or is empty. The content is never part of an
// error. environ itself is not modified.
func ReadSecretFiles(vars []Var, environ map[string]string) (map[string]string, error) {
	out := environ
	cloned := false
	var errs []error
	for _, v := range vars {
		if v.FileOf == "" {
			continue
		}
		path, ok := environ[v.Key]
		if !ok || path == "" {
			continue
		}
		if plain, set := environ[v.FileOf]; set && plain != "" {
			errs = append(errs, &VarError{Var: v.Key, Reason: "both " + v.FileOf + " and " + v.Key + " are set; set only one of them"})
			continue
		}
		b, err := os.ReadFile(path)
		if err != nil {
			reason := err.Error()
			var pe *fs.PathError
			if errors.As(err, &pe) {
				reason = pe.Err.Error() // the path is in Value already
			}
			errs = append(errs, &VarError{Var: v.Key, Value: path, Reason: "cannot read file: " + reason})
			continue
		}
		value := strings.TrimRight(string(b), "\r\n")
		if value == "" {
			errs = append(errs, &VarError{Var: v.Key, Value: path, Reason: "the file is empty"})
			continue
		}
		if !cloned {
			out, cloned = maps.Clone(environ), true
		}
		out[v.FileOf] = value
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return out, nil
}
