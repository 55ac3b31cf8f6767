package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/sluicehq/sluice/admin"
	"github.com/sluicehq/sluice/migrations"
	"github.com/sluicehq/sluice/schema"
)

func openSchemas(cmd *cobra.Command) (*schema.Registry, func(), error) {
	cfg, logger, pool, err := loadConfigPool(cmd, migrations.RoleMain)
	if err != nil {
		return nil, nil, err
	}
	return schema.New(pool, cfg.Schema, logger), pool.Close, nil
}

// schemaAudit records a change made by a schema command in the admin
// audit log (who: cli:{user}), with the action names of the admin API.
type schemaAudit func(action, target string, request, result any) error

// openSchemasAudited is openSchemas for the commands that change the
// registry: the audit of their changes goes to the same database.
func openSchemasAudited(cmd *cobra.Command) (*schema.Registry, schemaAudit, func(), error) {
	cfg, logger, pool, err := loadConfigPool(cmd, migrations.RoleMain)
	if err != nil {
		return nil, nil, nil, err
	}
	audit := func(action, target string, request, result any) error {
		if err := admin.RecordCLI(cmd.Context(), pool, logger, cliWho(), action, target, request, result); err != nil {
			return fmt.Errorf("%s: done, but its audit record was not written: %w", target, err)
		}
		return nil
	}
	return schema.New(pool, cfg.Schema, logger), audit, pool.Close, nil
}

func printJSON(cmd *cobra.Command, v any) error {
	enc := json.NewEncoder(cmd.OutOrStdout())
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// schemaErr maps the registry's refusals to exit codes: 3 not found,
// 4 incompatible or invalid (a schema or an upcaster).
func schemaErr(err error) error {
	var ie *schema.IncompatibleError
	var se *schema.InvalidSchemaError
	var ce *schema.UpcasterCheckError
	var ue *schema.UpcasterError
	switch {
	case errors.Is(err, schema.ErrNotFound):
		return &exitError{code: 3, err: err}
	case errors.As(err, &ie):
		return &exitError{code: 4, err: fmt.Errorf("v%d of %s breaks %s compatibility:\n  - %s", ie.Version, ie.EventType, ie.Compatibility, strings.Join(ie.Reasons, "\n  - "))}
	case errors.As(err, &ce):
		return &exitError{code: 4, err: fmt.Errorf("the upcaster of %s v%d→v%d breaks its examples:\n  - %s", ce.EventType, ce.From, ce.From+1, strings.Join(ce.Reasons, "\n  - "))}
	case errors.As(err, &se), errors.As(err, &ue):
		return &exitError{code: 4, err: err}
	}
	return err
}

// printUpcaster reports what was done with an upcaster.
func printUpcaster(cmd *cobra.Command, u *schema.UpcasterResult) {
	if u == nil {
		return
	}
	switch {
	case u.DryRun:
		fmt.Fprintf(cmd.OutOrStdout(), "upcaster %s v%d→v%d holds on its %s; dry run, nothing stored\n", u.EventType, u.From, u.To, examples(u.Examples))
	case u.Existing:
		fmt.Fprintf(cmd.OutOrStdout(), "upcaster %s v%d→v%d: the same file is set already\n", u.EventType, u.From, u.To)
	case u.Replaced:
		fmt.Fprintf(cmd.OutOrStdout(), "upcaster %s v%d→v%d replaced (it holds on its %s)\n", u.EventType, u.From, u.To, examples(u.Examples))
	default:
		fmt.Fprintf(cmd.OutOrStdout(), "upcaster %s v%d→v%d set (it holds on its %s)\n", u.EventType, u.From, u.To, examples(u.Examples))
	}
}

func examples(n int) string {
	if n == 1 {
		return "example"
	}
	return fmt.Sprintf("%d examples", n)
}

func newSchemaCmd() *cobra.Command {
	c := &cobra.Command{Use: "schema", Short: "Register, list, show, check and delete the JSON Schemas of event types (docs/schemas.md)"}
	c.AddCommand(newSchemaRegisterCmd(), newSchemaListCmd(), newSchemaShowCmd(), newSchemaDeleteCmd(),
		newSchemaCheckCmd(), newSchemaUpcasterCmd())
	return c
}

// newSchemaRegisterCmd is "sluice schema register".
func newSchemaRegisterCmd() *cobra.Command {
	var compat, upcasterFile string
	var dryRun, asJSON bool
	register := &cobra.Command{
		Use:   "register <event_type> <schema.json>",
		Short: "Register a schema file as the next version of an event type, if it keeps the type's compatibility mode",
		Long: `register adds the schema file as the next version of the event type when it compiles and keeps
the type's compatibility mode. With --upcaster, the upcaster file from the version before it
(docs/schemas.md#upcasting-on-read) is checked — each of its examples upcast and validated
against the new version — and stored in the same transaction.`,
		Example: "  sluice schema register OrderPlaced examples/schemas/OrderPlaced/v3.json --compatibility NONE \\\n      --upcaster examples/schemas/OrderPlaced/upcast-v2.yaml",
		Args:    cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			raw, err := readNamedFile(args[1])
			if err != nil {
				return err
			}
			o := schema.RegisterOptions{DryRun: dryRun}
			if upcasterFile != "" {
				if o.Upcaster, err = readNamedFile(upcasterFile); err != nil {
					return err
				}
				o.UpcasterSource = filepath.Base(upcasterFile)
			}
			mode := schema.Compatibility("")
			if compat != "" {
				if mode, err = schema.ParseCompatibility(compat); err != nil {
					return usage("--compatibility: %w", err)
				}
			}
			reg, audit, closeFn, err := openSchemasAudited(cmd)
			if err != nil {
				return err
			}
			defer closeFn()
			o.Compatibility = mode
			res, err := reg.Register(cmd.Context(), args[0], raw, o)
			if err != nil {
				return schemaErr(err)
			}
			if !res.DryRun && !res.Existing {
				req := map[string]any{"file": args[1], "compatibility": compat, "upcaster": upcasterFile}
				if err := audit("schema.register", "schema "+args[0], req, res); err != nil {
					return err
				}
			}
			if asJSON {
				return printJSON(cmd, res)
			}
			switch {
			case res.Existing:
				fmt.Fprintf(cmd.OutOrStdout(), "%s v%d: the same schema is registered already\n", res.EventType, res.Version)
			case res.DryRun:
				fmt.Fprintf(cmd.OutOrStdout(), "%s v%d would be registered (%s); dry run, nothing stored\n", res.EventType, res.Version, res.Compatibility)
			default:
				fmt.Fprintf(cmd.OutOrStdout(), "%s v%d registered (%s)\n", res.EventType, res.Version, res.Compatibility)
			}
			printUpcaster(cmd, res.Upcaster)
			return nil
		},
	}
	register.Flags().StringVar(&compat, "compatibility", "", "set the type's mode first: BACKWARD (default of a new type), BACKWARD_TRANSITIVE, FORWARD, FORWARD_TRANSITIVE, FULL, FULL_TRANSITIVE, NONE")
	register.Flags().StringVar(&upcasterFile, "upcaster", "", "an upcaster file (YAML) from the previous version to this one, checked and stored with it")
	register.Flags().BoolVar(&dryRun, "dry-run", false, "check and report, store nothing")
	register.Flags().BoolVar(&asJSON, "json", false, "print the result as JSON")
	return register
}

// newSchemaListCmd is "sluice schema list".
func newSchemaListCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List the event types with a schema, their mode and versions",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			reg, closeFn, err := openSchemas(cmd)
			if err != nil {
				return err
			}
			defer closeFn()
			types, err := reg.Types(cmd.Context())
			if err != nil {
				return err
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "EVENT TYPE\tCOMPATIBILITY\tLATEST\tVERSIONS\tUPCASTERS")
			for _, t := range types {
				ups := make([]string, len(t.Upcasters))
				for i, from := range t.Upcasters {
					ups[i] = fmt.Sprintf("v%d→v%d", from, from+1)
				}
				fmt.Fprintf(tw, "%s\t%s\t%d\t%v\t%s\n", t.EventType, t.Compatibility, t.Latest, t.Versions, strings.Join(ups, " "))
			}
			return tw.Flush()
		},
	}
}

// newSchemaShowCmd is "sluice schema show".
func newSchemaShowCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "show <event_type> [version]",
		Short: "Print a registered schema (the latest version unless one is named)",
		Args:  cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			version := 0
			if len(args) == 2 {
				n, err := strconv.Atoi(strings.TrimPrefix(args[1], "v"))
				if err != nil || n < 1 {
					return fmt.Errorf("version %q: a number >= 1", args[1])
				}
				version = n
			}
			reg, closeFn, err := openSchemas(cmd)
			if err != nil {
				return err
			}
			defer closeFn()
			s, err := reg.Get(cmd.Context(), args[0], version)
			if err != nil {
				return schemaErr(err)
			}
			return printJSON(cmd, s)
		},
	}
}

// newSchemaDeleteCmd is "sluice schema delete".
func newSchemaDeleteCmd() *cobra.Command {
	var delVersion int
	var delDry bool
	del := &cobra.Command{
		Use:   "delete <event_type>",
		Short: "Delete one version (--version) or every version of an event type's schema; stored events are untouched",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if delVersion < 0 {
				return usage("--version %d: want a version >= 1 (0: all)", delVersion)
			}
			reg, audit, closeFn, err := openSchemasAudited(cmd)
			if err != nil {
				return err
			}
			defer closeFn()
			vs, err := reg.Delete(cmd.Context(), args[0], delVersion, delDry)
			if err != nil {
				return schemaErr(err)
			}
			if !delDry {
				res := map[string]any{"event_type": args[0], "deleted_versions": vs}
				if err := audit("schema.delete", "schema "+args[0], map[string]any{"version": delVersion}, res); err != nil {
					return err
				}
			}
			verb := "deleted"
			if delDry {
				verb = "would be deleted (dry run)"
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s versions %v %s\n", args[0], vs, verb)
			return nil
		},
	}
	del.Flags().IntVar(&delVersion, "version", 0, "the version to delete (0: all)")
	del.Flags().BoolVar(&delDry, "dry-run", false, "report, delete nothing")
	return del
}

// parseFrom reads a from version argument ("2" or "v2").
func parseFrom(s string) (int, error) {
	n, err := strconv.Atoi(strings.TrimPrefix(s, "v"))
	if err != nil || n < 1 {
		return 0, fmt.Errorf("version %q: a number >= 1", s)
	}
	return n, nil
}

// newSchemaUpcasterCmd is `sluice schema upcaster set|show|delete`.
func newSchemaUpcasterCmd() *cobra.Command {
	c := &cobra.Command{Use: "upcaster", Short: "Set, show and delete the upcasters that bring an event type's versions to the next on read (docs/schemas.md#upcasting-on-read)"}
	c.AddCommand(newSchemaUpcasterSetCmd(), newSchemaUpcasterShowCmd(), newSchemaUpcasterDeleteCmd())
	return c
}

// newSchemaUpcasterSetCmd is "sluice schema upcaster set".
func newSchemaUpcasterSetCmd() *cobra.Command {
	var dryRun, asJSON bool
	set := &cobra.Command{
		Use:   "set <upcaster.yaml>",
		Short: "Set (or replace) the upcaster of a file from its version to the next, once its examples hold",
		Long: `set stores the upcaster of the file (its event_type and from say which) once it compiles and
each of its examples is valid data of version from, and its upcast valid data of version from+1
(and equal to its want). Both versions must be registered. Reads with as=latest and projections
with upcast: latest use it within EVENT_SCHEMA_REFRESH_INTERVAL. Exit 4: invalid or an example fails.`,
		Example: "  sluice schema upcaster set examples/schemas/OrderPlaced/upcast-v1.yaml --dry-run",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			raw, err := readNamedFile(args[0])
			if err != nil {
				return err
			}
			reg, audit, closeFn, err := openSchemasAudited(cmd)
			if err != nil {
				return err
			}
			defer closeFn()
			res, err := reg.SetUpcaster(cmd.Context(), raw, schema.UpcasterOptions{Source: filepath.Base(args[0]), DryRun: dryRun})
			if err != nil {
				return schemaErr(err)
			}
			if !res.DryRun && !res.Existing {
				target := fmt.Sprintf("schema %s upcaster v%d", res.EventType, res.From)
				if err := audit("schema.upcaster", target, map[string]any{"file": args[0]}, res); err != nil {
					return err
				}
			}
			if asJSON {
				return printJSON(cmd, res)
			}
			printUpcaster(cmd, &res)
			return nil
		},
	}
	set.Flags().BoolVar(&dryRun, "dry-run", false, "check and report, store nothing")
	set.Flags().BoolVar(&asJSON, "json", false, "print the result as JSON")
	return set
}

// newSchemaUpcasterShowCmd is "sluice schema upcaster show".
func newSchemaUpcasterShowCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "show <event_type> <from_version>",
		Short: "Print the upcaster of an event type from a version (its file as set)",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			from, err := parseFrom(args[1])
			if err != nil {
				return err
			}
			reg, closeFn, err := openSchemas(cmd)
			if err != nil {
				return err
			}
			defer closeFn()
			u, err := reg.GetUpcaster(cmd.Context(), args[0], from)
			if err != nil {
				return schemaErr(err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "# %s v%d→v%d, from %s, set %s\n%s", u.EventType, u.From, u.To, u.Source, u.UpdatedAt.UTC().Format("2006-01-02T15:04:05Z"), u.Spec)
			return nil
		},
	}
}

// newSchemaUpcasterDeleteCmd is "sluice schema upcaster delete".
func newSchemaUpcasterDeleteCmd() *cobra.Command {
	var delDry bool
	del := &cobra.Command{
		Use:   "delete <event_type> <from_version>",
		Short: "Delete the upcaster of an event type from a version: reads then take that version's data as the next one's",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			from, err := parseFrom(args[1])
			if err != nil {
				return err
			}
			reg, audit, closeFn, err := openSchemasAudited(cmd)
			if err != nil {
				return err
			}
			defer closeFn()
			if err := reg.DeleteUpcaster(cmd.Context(), args[0], from, delDry); err != nil {
				return schemaErr(err)
			}
			if !delDry {
				target := fmt.Sprintf("schema %s upcaster v%d", args[0], from)
				res := map[string]any{"event_type": args[0], "from": from, "to": from + 1, "deleted": true}
				if err := audit("schema.upcaster_delete", target, map[string]any{}, res); err != nil {
					return err
				}
			}
			verb := "deleted"
			if delDry {
				verb = "would be deleted (dry run)"
			}
			fmt.Fprintf(cmd.OutOrStdout(), "upcaster %s v%d→v%d %s\n", args[0], from, from+1, verb)
			return nil
		},
	}
	del.Flags().BoolVar(&delDry, "dry-run", false, "report, delete nothing")
	return del
}

// versionFile matches the file names of a type's directory: v1.json, v2.json, …
var versionFile = regexp.MustCompile(`^v([0-9]+)\.json$`)

func newSchemaCheckCmd() *cobra.Command {
	var previous []string
	var compat string
	var online bool
	var eventType, upcasterFile string
	c := &cobra.Command{
		Use:   "check <schema.json | upcaster.yaml>",
		Short: "Check a candidate schema (and its upcaster) against earlier versions, offline (for CI) or against the registry (--online)",
		Long: `Check compiles the candidate (JSON Schema draft 2020-12) and checks it against the
earlier versions under the compatibility mode, exactly as "sluice schema register" would.

Offline (the default), the earlier versions are the --previous files, in order, or else the
files v1.json, v2.json, … beside the candidate with a lower number than its own (a candidate
named v3.json is checked against v1.json and v2.json of its directory). Nothing is read from
Postgres, so CI can run it. With --online, the earlier versions are those registered for
--event-type (default: the name of the candidate's directory).

The upcaster into the candidate — --upcaster, or else the file upcast-vN.yaml beside it, N the
version before the candidate's — is checked too: each of its examples must be valid data of
version N, and its upcast valid data of the candidate (and equal to its want).

Given an upcaster file instead of a schema, check checks that upcaster alone: offline against
the files v{from}.json and v{from+1}.json beside it, online against the registered versions.
Exit status 4: incompatible or invalid. See docs/schemas.md.`,
		Example: `  sluice schema check examples/schemas/OrderPlaced/v2.json
  sluice schema check examples/schemas/OrderPlaced/v3.json --compatibility NONE
  sluice schema check examples/schemas/OrderPlaced/upcast-v2.yaml`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if online && (compat != "" || len(previous) > 0) {
				// Online the registered versions and the type's own mode
				// decide; a flag that would not apply is refused, not ignored.
				return usage("--compatibility and --previous apply offline; with --online the registered versions and the type's mode are checked (set the mode with sluice schema register --compatibility)")
			}
			raw, err := readNamedFile(args[0])
			if err != nil {
				return err
			}
			if ext := filepath.Ext(args[0]); ext == ".yaml" || ext == ".yml" {
				return checkUpcasterFile(cmd, args[0], raw, online)
			}
			if eventType == "" {
				eventType = filepath.Base(filepath.Dir(mustAbs(args[0])))
			}
			candNum := 0
			if m := versionFile.FindStringSubmatch(filepath.Base(args[0])); m != nil {
				candNum, _ = strconv.Atoi(m[1])
			}
			upPath, up, err := candidateUpcaster(args[0], candNum, upcasterFile)
			if err != nil {
				return err
			}
			if online {
				reg, closeFn, err := openSchemas(cmd)
				if err != nil {
					return err
				}
				defer closeFn()
				res, err := reg.CheckWithUpcaster(cmd.Context(), eventType, raw, up, filepath.Base(upPath))
				if err != nil {
					return schemaErr(err)
				}
				return reportCheck(cmd, eventType, res.Version, res.Compatibility, res.Reasons, res.Upcaster)
			}
			return checkOffline(cmd, checkInput{path: args[0], raw: raw, candNum: candNum, eventType: eventType, upPath: upPath, up: up}, compat, previous)
		},
	}
	c.Flags().StringArrayVar(&previous, "previous", nil, "an earlier version's schema file, oldest first (repeat)")
	c.Flags().StringVar(&compat, "compatibility", "", "the mode to check (default BACKWARD)")
	c.Flags().BoolVar(&online, "online", false, "check against the versions registered in Postgres (DATABASE_URL)")
	c.Flags().StringVar(&eventType, "event-type", "", "the event type (default: the candidate's directory name)")
	c.Flags().StringVar(&upcasterFile, "upcaster", "", "the upcaster file into the candidate (default: upcast-vN.yaml beside it, N the previous version)")
	return c
}

// checkInput is what "sluice schema check" checks: the candidate schema
// file (its path, bytes and version number from its name, 0 when none),
// the event type, and the upcaster into it (path and bytes; none: nil).
type checkInput struct {
	path      string
	raw       []byte
	candNum   int
	eventType string
	upPath    string
	up        []byte
}

// checkOffline checks the candidate against the earlier versions read from
// files (previous, else the vN.json files beside it), and the upcaster
// into it against its examples: nothing is read from Postgres.
func checkOffline(cmd *cobra.Command, in checkInput, compat string, previous []string) error {
	mode, err := schema.ParseCompatibility(compat)
	if err != nil {
		return usage("--compatibility: %w", err)
	}
	cand, err := schema.Compile(in.raw)
	if err != nil {
		return &exitError{code: 4, err: fmt.Errorf("%s: %w", in.path, err)}
	}
	files := previous
	if len(files) == 0 {
		if files, err = siblingVersions(in.path, in.candNum); err != nil {
			return err
		}
	}
	var earlier []schema.Version
	for i, f := range files {
		b, err := readNamedFile(f)
		if err != nil {
			return err
		}
		s, err := schema.Compile(b)
		if err != nil {
			return &exitError{code: 4, err: fmt.Errorf("%s: %w", f, err)}
		}
		earlier = append(earlier, schema.Version{Version: i + 1, Schema: s})
	}
	version := len(earlier) + 1
	reasons := schema.CheckCompatibility(mode, schema.Version{Version: version, Schema: cand}, earlier)
	var ur *schema.UpcasterResult
	if in.up != nil {
		u, err := schema.ParseUpcaster(filepath.Base(in.upPath), in.up)
		switch {
		case err != nil:
			return &exitError{code: 4, err: err}
		case u.EventType != in.eventType || u.To() != version:
			return &exitError{code: 4, err: fmt.Errorf("%s is the upcaster of %s v%d→v%d, not into %s v%d", in.upPath, u.EventType, u.From, u.To(), in.eventType, version)}
		}
		for _, r := range u.CheckExamples(earlier[len(earlier)-1].Schema, cand) {
			reasons = append(reasons, "upcaster: "+r)
		}
		ur = &schema.UpcasterResult{EventType: u.EventType, From: u.From, To: u.To(), Examples: len(u.Examples), DryRun: true}
	}
	return reportCheck(cmd, in.eventType, version, mode, reasons, ur)
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// candidateUpcaster is the upcaster file that comes with the candidate
// schema at path (version candNum): given (--upcaster), else
// upcast-v{candNum-1}.yaml beside it when there is one; "" and nil when
// neither.
func candidateUpcaster(path string, candNum int, given string) (string, []byte, error) {
	upPath := given
	if upPath == "" && candNum > 1 {
		if p := filepath.Join(filepath.Dir(path), fmt.Sprintf("upcast-v%d.yaml", candNum-1)); fileExists(p) {
			upPath = p
		}
	}
	if upPath == "" {
		return "", nil, nil
	}
	up, err := readNamedFile(upPath)
	return upPath, up, err
}

// checkUpcasterFile is `sluice schema check upcast-vN.yaml`: the upcaster
// alone, against vN.json and vN+1.json beside it, or the registered
// versions (--online: SetUpcaster as a dry run).
func checkUpcasterFile(cmd *cobra.Command, path string, raw []byte, online bool) error {
	u, err := schema.ParseUpcaster(filepath.Base(path), raw)
	if err != nil {
		return &exitError{code: 4, err: err}
	}
	if online {
		reg, closeFn, err := openSchemas(cmd)
		if err != nil {
			return err
		}
		defer closeFn()
		res, err := reg.SetUpcaster(cmd.Context(), raw, schema.UpcasterOptions{Source: filepath.Base(path), DryRun: true})
		if err != nil {
			return schemaErr(err)
		}
		return reportUpcaster(cmd, &res)
	}
	load := func(v int) (*schema.Compiled, error) {
		f := filepath.Join(filepath.Dir(path), fmt.Sprintf("v%d.json", v))
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("the upcaster of %s v%d→v%d is checked against v%d.json and v%d.json beside it: %w", u.EventType, u.From, u.To(), u.From, u.To(), err)
		}
		c, err := schema.Compile(b)
		if err != nil {
			return nil, &exitError{code: 4, err: fmt.Errorf("%s: %w", f, err)}
		}
		return c, nil
	}
	from, err := load(u.From)
	if err != nil {
		return err
	}
	to, err := load(u.To())
	if err != nil {
		return err
	}
	if reasons := u.CheckExamples(from, to); len(reasons) > 0 {
		return schemaErr(&schema.UpcasterCheckError{EventType: u.EventType, From: u.From, Reasons: reasons})
	}
	return reportUpcaster(cmd, &schema.UpcasterResult{EventType: u.EventType, From: u.From, To: u.To(), Examples: len(u.Examples), DryRun: true})
}

func reportUpcaster(cmd *cobra.Command, u *schema.UpcasterResult) error {
	fmt.Fprintf(cmd.OutOrStdout(), "upcaster %s v%d→v%d holds on its %s\n", u.EventType, u.From, u.To, examples(u.Examples))
	return nil
}

func mustAbs(p string) string {
	a, err := filepath.Abs(p)
	if err != nil {
		return p
	}
	return a
}

// siblingVersions lists the vN.json files beside candidate with N below
// below (all of them when below is 0), by N.
func siblingVersions(candidate string, below int) ([]string, error) {
	dir := filepath.Dir(candidate)
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	type vf struct {
		n    int
		path string
	}
	var out []vf
	for _, e := range entries {
		m := versionFile.FindStringSubmatch(e.Name())
		if m == nil || filepath.Join(dir, e.Name()) == filepath.Clean(candidate) {
			continue
		}
		n, _ := strconv.Atoi(m[1])
		if below == 0 || n < below {
			out = append(out, vf{n, filepath.Join(dir, e.Name())})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].n < out[j].n })
	paths := make([]string, len(out))
	for i, f := range out {
		paths[i] = f.path
	}
	return paths, nil
}

func reportCheck(cmd *cobra.Command, eventType string, version int, mode schema.Compatibility, reasons []string, up *schema.UpcasterResult) error {
	if len(reasons) == 0 {
		fmt.Fprintf(cmd.OutOrStdout(), "%s v%d is compatible (%s)\n", eventType, version, mode)
		if up != nil {
			return reportUpcaster(cmd, up)
		}
		return nil
	}
	return &exitError{code: 4, err: fmt.Errorf("%s v%d breaks %s compatibility:\n  - %s", eventType, version, mode, strings.Join(reasons, "\n  - "))}
}
