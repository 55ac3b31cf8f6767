// Package auth is sluice's access control (docs/security.md): who a request
// comes from (a principal: an API key of sluice.auth_keys, a token of
// SLUICE_API_TOKENS, an admin token) and what it may do (grants of
// operations on resource patterns). It owns the table sluice.auth_keys.
//
// Guarantees: an API key's secret is shown once, when made, and stored as
// its SHA-256 only; a presented secret is compared in constant time; a
// revoked or expired key stops working within SLUICE_AUTH_KEY_REFRESH in
// every process, at once in the process that revoked it. A principal's name
// is what the API records in the metadata of what it appends
// (envelope.MetaPrincipal).
package auth

import (
	"fmt"
	"regexp"
	"slices"
)

// Principal is who a request comes from and what it may do.
type Principal struct {
	// Name is recorded in the metadata of what the principal appends:
	// the key's principal, "api-token:{n}" for the n-th SLUICE_API_TOKENS
	// entry, "admin:operator" or "admin:read" for the admin tokens, ""
	// for the anonymous principal of an open API.
	Name string
	// KeyID is the API key used ("" for the others).
	KeyID  string
	Grants []Grant
}

// Anonymous is the principal of a request without credentials on an API
// that does not require them (neither SLUICE_API_TOKENS nor
// SLUICE_AUTH_REQUIRED): every operation of /v1 on everything, as before
// access control existed; nothing is recorded as its name.
var Anonymous = &Principal{Grants: mustGrants("append,read,subscribe,command=*")}

// Built-in principals of the configured tokens.
func fullAccess(name string) *Principal {
	return &Principal{Name: name, Grants: mustGrants("append,read,subscribe,command=*")}
}

// AdminOperator and AdminReader are the two built-in roles of the admin
// tokens (SLUICE_ADMIN_TOKEN, SLUICE_ADMIN_READ_TOKEN).
func AdminOperator() *Principal {
	return &Principal{Name: "admin:operator", Grants: mustGrants("admin_read,admin_act=*")}
}

// AdminReader is the read-only admin role.
func AdminReader() *Principal {
	return &Principal{Name: "admin:read", Grants: mustGrants("admin_read=*")}
}

func mustGrants(ss ...string) []Grant {
	out := make([]Grant, len(ss))
	for i, s := range ss {
		g, err := ParseGrant(s)
		if err != nil {
			panic(err)
		}
		out[i] = g
	}
	return out
}

// Allows reports whether p may do op on r.
func (p *Principal) Allows(op Operation, r Resource) bool {
	if p == nil {
		return false
	}
	for _, g := range p.Grants {
		if slices.Contains(g.Ops, op) && g.pattern.Match(r) {
			return true
		}
	}
	return false
}

// AllowsAny reports whether p may do op on anything at all (the log
// without a type filter: what it may not read is filtered out).
func (p *Principal) AllowsAny(op Operation) bool {
	if p == nil {
		return false
	}
	for _, g := range p.Grants {
		if slices.Contains(g.Ops, op) {
			return true
		}
	}
	return false
}

// DeniedError is a request outside the principal's grants: 403, naming
// the missing permission.
type DeniedError struct {
	Principal string
	Op        Operation
	Resource  Resource
}

func (e *DeniedError) Error() string {
	who := e.Principal
	if who == "" {
		who = "the anonymous principal"
	}
	return fmt.Sprintf("%s lacks the permission %s on %s", who, e.Op, e.Resource)
}

// Check returns a *DeniedError unless p may do op on r.
func (p *Principal) Check(op Operation, r Resource) error {
	if p.Allows(op, r) {
		return nil
	}
	name := ""
	if p != nil {
		name = p.Name
	}
	return &DeniedError{Principal: name, Op: op, Resource: r}
}

// principalRule is the rule for the principal of an API key: no ':', so a
// key never takes the name of a built-in principal.
var principalRule = regexp.MustCompile(`^[a-z0-9][a-z0-9._@-]{0,127}$`)

// PrincipalPattern is principalRule's text.
const PrincipalPattern = `[a-z0-9][a-z0-9._@-]{0,127}`

// ValidatePrincipal checks the name of a key's principal.
func ValidatePrincipal(name string) error {
	if !principalRule.MatchString(name) {
		return fmt.Errorf("principal %q must match %s", name, PrincipalPattern)
	}
	return nil
}
