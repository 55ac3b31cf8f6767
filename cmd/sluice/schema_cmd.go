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

	"github.com/sluicehq/sluice/schema"
)

func openSchemas(cmd *cobra.Command) (*schema.Registry, func(), error) {
	cfg, logger, pool, err := loadConfigPool(cmd)
	if err != nil {
		return nil, nil, err
	}
	return schema.New(pool, cfg.Schema, logger), pool.Close, nil
}

func printJSON(cmd *cobra.Command, v any) error {
	enc := json.NewEncoder(cmd.OutOrStdout())
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// schemaErr maps the registry's refusals to exit codes: 3 not found,
// 4 incompatible or invalid.
func schemaErr(err error) error {
	var ie *schema.IncompatibleError
	var se *schema.InvalidSchemaError
	switch {
	case errors.Is(err, schema.ErrNotFound):
		return &exitError{code: 3, err: err}
	case errors.As(err, &ie):
		return &exitError{code: 4, err: fmt.Errorf("v%d of %s breaks %s compatibility:\n  - %s", ie.Version, ie.EventType, ie.Compatibility, strings.Join(ie.Reasons, "\n  - "))}
	case errors.As(err, &se):
		return &exitError{code: 4, err: err}
	}
	return err
}

func newSchemaCmd() *cobra.Command {
	c := &cobra.Command{Use: "schema", Short: "Register, list, show, check and delete the JSON Schemas of event types (docs/schemas.md)"}
	var compat string
	var dryRun, asJSON bool
	register := &cobra.Command{
		Use:   "register <event_type> <schema.json>",
		Short: "Register a schema file as the next version of an event type, if it keeps the type's compatibility mode",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			raw, err := os.ReadFile(args[1])
			if err != nil {
				return err
			}
			mode := schema.Compatibility("")
			if compat != "" {
				if mode, err = schema.ParseCompatibility(compat); err != nil {
					return err
				}
			}
			reg, closeFn, err := openSchemas(cmd)
			if err != nil {
				return err
			}
			defer closeFn()
			res, err := reg.Register(cmd.Context(), args[0], raw, schema.RegisterOptions{Compatibility: mode, DryRun: dryRun})
			if err != nil {
				return schemaErr(err)
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
			return nil
		},
	}
	register.Flags().StringVar(&compat, "compatibility", "", "set the type's mode first: BACKWARD (default of a new type), BACKWARD_TRANSITIVE, FORWARD, FORWARD_TRANSITIVE, FULL, FULL_TRANSITIVE, NONE")
	register.Flags().BoolVar(&dryRun, "dry-run", false, "check and report, store nothing")
	register.Flags().BoolVar(&asJSON, "json", false, "print the result as JSON")
	c.AddCommand(register)

	c.AddCommand(&cobra.Command{
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
			fmt.Fprintln(tw, "EVENT TYPE\tCOMPATIBILITY\tLATEST\tVERSIONS")
			for _, t := range types {
				fmt.Fprintf(tw, "%s\t%s\t%d\t%v\n", t.EventType, t.Compatibility, t.Latest, t.Versions)
			}
			return tw.Flush()
		},
	})

	c.AddCommand(&cobra.Command{
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
	})

	var delVersion int
	var delDry bool
	del := &cobra.Command{
		Use:   "delete <event_type>",
		Short: "Delete one version (--version) or every version of an event type's schema; stored events are untouched",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			reg, closeFn, err := openSchemas(cmd)
			if err != nil {
				return err
			}
			defer closeFn()
			vs, err := reg.Delete(cmd.Context(), args[0], delVersion, delDry)
			if err != nil {
				return schemaErr(err)
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
	c.AddCommand(del)

	c.AddCommand(newSchemaCheckCmd())
	return c
}

// versionFile matches the file names of a type's directory: v1.json, v2.json, …
var versionFile = regexp.MustCompile(`^v([0-9]+)\.json$`)

func newSchemaCheckCmd() *cobra.Command {
	var previous []string
	var compat string
	var online bool
	var eventType string
	c := &cobra.Command{
		Use:   "check <schema.json>",
		Short: "Check a candidate schema against earlier versions, offline (for CI) or against the registry (--online)",
		Long: `Check compiles the candidate (JSON Schema draft 2020-12) and checks it against the
earlier versions under the compatibility mode, exactly as "sluice schema register" would.

Offline (the default), the earlier versions are the --previous files, in order, or else the
files v1.json, v2.json, … beside the candidate with a lower number than its own (a candidate
named v3.json is checked against v1.json and v2.json of its directory). Nothing is read from
Postgres, so CI can run it. With --online, the earlier versions are those registered for
--event-type (default: the name of the candidate's directory). Exit status 4: incompatible or
invalid. See docs/schemas.md.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			raw, err := os.ReadFile(args[0])
			if err != nil {
				return err
			}
			if eventType == "" {
				eventType = filepath.Base(filepath.Dir(mustAbs(args[0])))
			}
			if online {
				reg, closeFn, err := openSchemas(cmd)
				if err != nil {
					return err
				}
				defer closeFn()
				res, err := reg.Check(cmd.Context(), eventType, raw)
				if err != nil {
					return schemaErr(err)
				}
				return reportCheck(cmd, eventType, res.Version, res.Compatibility, res.Reasons)
			}
			mode, err := schema.ParseCompatibility(compat)
			if err != nil {
				return err
			}
			cand, err := schema.Compile(raw)
			if err != nil {
				return &exitError{code: 4, err: fmt.Errorf("%s: %w", args[0], err)}
			}
			files := previous
			candNum := 0
			if m := versionFile.FindStringSubmatch(filepath.Base(args[0])); m != nil {
				candNum, _ = strconv.Atoi(m[1])
			}
			if len(files) == 0 {
				if files, err = siblingVersions(args[0], candNum); err != nil {
					return err
				}
			}
			var earlier []schema.Version
			for i, f := range files {
				b, err := os.ReadFile(f)
				if err != nil {
					return err
				}
				s, err := schema.Compile(b)
				if err != nil {
					return &exitError{code: 4, err: fmt.Errorf("%s: %w", f, err)}
				}
				earlier = append(earlier, schema.Version{Version: i + 1, Schema: s})
			}
			reasons := schema.CheckCompatibility(mode, schema.Version{Version: len(earlier) + 1, Schema: cand}, earlier)
			return reportCheck(cmd, eventType, len(earlier)+1, mode, reasons)
		},
	}
	c.Flags().StringArrayVar(&previous, "previous", nil, "an earlier version's schema file, oldest first (repeat)")
	c.Flags().StringVar(&compat, "compatibility", "", "the mode to check (default BACKWARD)")
	c.Flags().BoolVar(&online, "online", false, "check against the versions registered in Postgres (DATABASE_URL)")
	c.Flags().StringVar(&eventType, "event-type", "", "the event type (default: the candidate's directory name)")
	return c
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

func reportCheck(cmd *cobra.Command, eventType string, version int, mode schema.Compatibility, reasons []string) error {
	if len(reasons) == 0 {
		fmt.Fprintf(cmd.OutOrStdout(), "%s v%d is compatible (%s)\n", eventType, version, mode)
		return nil
	}
	return &exitError{code: 4, err: fmt.Errorf("%s v%d breaks %s compatibility:\n  - %s", eventType, version, mode, strings.Join(reasons, "\n  - "))}
}
