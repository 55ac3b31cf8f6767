package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/user"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluicehq/sluice/admin"
	"github.com/sluicehq/sluice/auth"
	"github.com/sluicehq/sluice/migrations"
)

func newAuthCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "auth",
		Short: "Manage API keys and their grants (docs/security.md)",
		Long: `Access control of the API (docs/security.md#api-keys): API keys, each of a
principal with grants of operations on resource patterns. Every change is
recorded in the admin audit log (who: cli:{user}).`,
	}
	k := &cobra.Command{Use: "key", Short: "Create, list, revoke and rotate API keys"}
	k.AddCommand(newAuthKeyCreateCmd(), newAuthKeyListCmd(), newAuthKeyRevokeCmd(), newAuthKeyRotateCmd())
	c.AddCommand(k)
	return c
}

// cliWho names the operator of a command in the audit log.
func cliWho() string {
	name := os.Getenv("USER")
	if u, err := user.Current(); err == nil && u.Username != "" {
		name = u.Username
	}
	if name == "" {
		name = "unknown"
	}
	return "cli:" + name
}

func newAuthKeyCreateCmd() *cobra.Command {
	var principal, description string
	var grants []string
	var expiresIn time.Duration
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "create",
		Short: "Make an API key; its secret is printed once",
		Example: `  sluice auth key create --principal team-orders \
    --grant 'append,read,subscribe=stream:Order/eu-*' --grant 'command,read=db:orders'`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			req := auth.CreateRequest{Principal: principal, Description: description, By: cliWho()}
			for _, s := range grants {
				g, err := auth.ParseGrant(s)
				if err == nil {
					err = auth.CheckAdminScope(g)
				}
				if err != nil {
					return usage("--grant: %w", err)
				}
				req.Grants = append(req.Grants, g)
			}
			if len(req.Grants) == 0 {
				return usage("give at least one --grant op[,op…]=pattern (docs/security.md#permissions)")
			}
			if err := auth.ValidatePrincipal(principal); err != nil {
				return usage("--principal: %w", err)
			}
			if err := auth.ValidateDescription(description); err != nil {
				return usage("--description: %w", err)
			}
			if expiresIn < 0 {
				// Read as "never" before: a mistyped sign made a key
				// that never expires.
				return usage("--expires-in %s: want a positive duration such as 2160h (0: never)", expiresIn)
			}
			if expiresIn > 0 {
				t := time.Now().Add(expiresIn)
				req.ExpiresAt = &t
			}
			_, logger, pool, err := loadConfigPool(cmd, migrations.RoleMain)
			if err != nil {
				return err
			}
			defer pool.Close()
			key, secret, err := auth.NewKeys(pool, auth.KeysOptions{Logger: logger}).Create(cmd.Context(), req)
			if err != nil {
				return err
			}
			if err := admin.RecordCLI(cmd.Context(), pool, logger, req.By, "auth.key.create", "key "+key.ID+" of "+key.Principal,
				map[string]any{"principal": principal, "grants": req.Grants, "description": description}, admin.KeyCreated{Key: key, Secret: "[shown once, not recorded]"}); err != nil {
				return fmt.Errorf("the key %s was made but its audit record was not written: %w", key.ID, err)
			}
			return printNewKey(cmd, key, secret, nil, asJSON)
		},
	}
	cmd.Flags().StringVar(&principal, "principal", "", "who the key is for, recorded in what it appends ("+auth.PrincipalPattern+")")
	cmd.Flags().StringArrayVar(&grants, "grant", nil, "op[,op…]=pattern, repeatable; ops: append, read, subscribe, command, admin_read, admin_act or *; patterns: *, db:{db}[/{class}[/{id}]], stream:{type}[/{id}] with * globs")
	cmd.Flags().StringVar(&description, "description", "", "free text shown in lists")
	cmd.Flags().DurationVar(&expiresIn, "expires-in", 0, "end the key after this long (0: never)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	_ = cmd.MarkFlagRequired("principal")
	return cmd
}

func printNewKey(cmd *cobra.Command, key auth.Key, secret string, old *auth.Key, asJSON bool) error {
	out := cmd.OutOrStdout()
	if asJSON {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(admin.KeyCreated{Key: key, Secret: secret, Old: old})
	}
	fmt.Fprintf(out, "key %s of %s\n", key.ID, key.Principal)
	for _, g := range key.Grants {
		fmt.Fprintf(out, "  grant %s\n", g)
	}
	if key.ExpiresAt != nil {
		fmt.Fprintf(out, "  expires %s\n", key.ExpiresAt.UTC().Format(time.RFC3339))
	}
	if old != nil {
		end := "revoked now"
		if old.RevokedAt == nil && old.ExpiresAt != nil {
			end = "works until " + old.ExpiresAt.UTC().Format(time.RFC3339)
		}
		fmt.Fprintf(out, "  replaces %s, which %s\n", old.ID, end)
	}
	fmt.Fprintf(out, "\nsecret (shown once; only its SHA-256 is kept):\n%s\n", secret)
	return nil
}

func newAuthKeyListCmd() *cobra.Command {
	var principal string
	var all, asJSON bool
	cmd := &cobra.Command{
		Use:   "list",
		Short: "One line per active API key (--all: revoked and expired too); never a secret",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, logger, pool, err := loadConfigPool(cmd, migrations.RoleMain)
			if err != nil {
				return err
			}
			defer pool.Close()
			keys, err := auth.NewKeys(pool, auth.KeysOptions{Logger: logger}).List(cmd.Context(), auth.ListFilter{Principal: principal, All: all})
			if err != nil {
				return err
			}
			if asJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(keys)
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "KEY ID\tPRINCIPAL\tSTATE\tCREATED\tGRANTS\tDESCRIPTION")
			now := time.Now()
			for _, k := range keys {
				state := "active"
				switch {
				case k.RevokedAt != nil:
					state = "revoked"
				case k.ExpiresAt != nil && !now.Before(*k.ExpiresAt):
					state = "expired"
				case k.ExpiresAt != nil:
					state = "until " + k.ExpiresAt.UTC().Format(time.RFC3339)
				}
				gs := make([]string, len(k.Grants))
				for i, g := range k.Grants {
					gs[i] = g.String()
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", k.ID, k.Principal, state, k.CreatedAt.UTC().Format(time.RFC3339), strings.Join(gs, " "), k.Description)
			}
			return tw.Flush()
		},
	}
	cmd.Flags().StringVar(&principal, "principal", "", "only this principal's keys")
	cmd.Flags().BoolVar(&all, "all", false, "include revoked and expired keys")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func newAuthKeyRevokeCmd() *cobra.Command {
	var g guardFlags
	cmd := &cobra.Command{
		Use:   "revoke <key id>",
		Short: "End an API key now (every api process within SLUICE_AUTH_KEY_REFRESH)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			_, logger, pool, err := loadConfigPool(cmd, migrations.RoleMain)
			if err != nil {
				return err
			}
			defer pool.Close()
			keys := auth.NewKeys(pool, auth.KeysOptions{Logger: logger})
			key, err := keys.Get(cmd.Context(), args[0])
			if err != nil {
				return fmt.Errorf("key %s: %w", args[0], err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "revoke key %s of %s\n", key.ID, key.Principal)
			ok, err := g.confirm(cmd, "revoke key "+key.ID)
			if !ok || err != nil {
				return err
			}
			key, err = keys.Revoke(cmd.Context(), key.ID, cliWho())
			if err != nil {
				return err
			}
			if err := admin.RecordCLI(cmd.Context(), pool, logger, cliWho(), "auth.key.revoke", "key "+key.ID+" of "+key.Principal, map[string]string{"key_id": key.ID}, key); err != nil {
				return fmt.Errorf("the key %s was revoked but its audit record was not written: %w", key.ID, err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "revoked at %s\n", key.RevokedAt.UTC().Format(time.RFC3339))
			return nil
		},
	}
	g.register(cmd, false)
	return cmd
}

func newAuthKeyRotateCmd() *cobra.Command {
	var grace time.Duration
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "rotate <key id>",
		Short: "Make a new key of the same principal and grants; the old one works for --grace more",
		Long: `Rotate an API key (docs/security.md#rotating-a-key): a new key with the old
key's principal, grants, description and expiry is made and printed once; the
old key keeps working for --grace (default 24h), so clients can move, and
then answers 401. --grace 0s revokes the old key at once (a leaked key).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if grace < 0 {
				return usage("--grace %s: want a duration >= 0 such as 24h (0s: revoke the old key now)", grace)
			}
			_, logger, pool, err := loadConfigPool(cmd, migrations.RoleMain)
			if err != nil {
				return err
			}
			defer pool.Close()
			rot, secret, err := auth.NewKeys(pool, auth.KeysOptions{Logger: logger}).Rotate(cmd.Context(), args[0], grace, cliWho())
			if err != nil {
				return fmt.Errorf("key %s: %w", args[0], err)
			}
			if err := admin.RecordCLI(cmd.Context(), pool, logger, cliWho(), "auth.key.rotate", "key "+rot.Old.ID+" -> "+rot.New.ID+" of "+rot.New.Principal,
				map[string]string{"key_id": args[0], "grace": grace.String()}, admin.KeyCreated{Key: rot.New, Secret: "[shown once, not recorded]", Old: &rot.Old}); err != nil {
				return fmt.Errorf("the key was rotated (new key %s) but its audit record was not written: %w", rot.New.ID, err)
			}
			return printNewKey(cmd, rot.New, secret, &rot.Old, asJSON)
		},
	}
	cmd.Flags().DurationVar(&grace, "grace", auth.DefaultRotationGrace, "how long the old key keeps working (0s: revoke it now)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}
