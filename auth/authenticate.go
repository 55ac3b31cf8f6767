package auth

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"strconv"
	"strings"
)

// Errors of Authenticate, all answered 401.
var (
	// ErrNoCredentials: the request has no Authorization header and the
	// API requires one.
	ErrNoCredentials = errors.New("a bearer token is required: Authorization: Bearer <token>")
	// ErrMalformed: the header is not "Bearer <token>".
	ErrMalformed = errors.New(`the Authorization header must be "Bearer <token>"`)
	// ErrInvalid: no principal has this token (unknown, revoked or
	// expired).
	ErrInvalid = errors.New("the bearer token is not valid (unknown, revoked or expired)")
)

// MaxTokenLen bounds a bearer token.
const MaxTokenLen = 4096

// ParseAuthorization reads an Authorization header of the Bearer scheme
// (RFC 6750 §2.1): the scheme case-insensitive, one or more spaces, a
// token68 (letters, digits, -._~+/ and trailing =). It returns
// ErrMalformed for anything else.
func ParseAuthorization(h string) (string, error) {
	scheme, rest, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", ErrMalformed
	}
	tok := strings.TrimLeft(rest, " ")
	if tok == "" || len(tok) > MaxTokenLen {
		return "", ErrMalformed
	}
	eq := false
	for i := 0; i < len(tok); i++ {
		c := tok[i]
		switch {
		case c == '=':
			eq = true
		case eq:
			return "", ErrMalformed // '=' only at the end
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9',
			c == '-', c == '.', c == '_', c == '~', c == '+', c == '/':
		default:
			return "", ErrMalformed
		}
	}
	if tok[0] == '=' {
		return "", ErrMalformed
	}
	return tok, nil
}

// Options configure an Authenticator.
type Options struct {
	// Keys are the API keys (nil: none).
	Keys *Keys
	// Tokens are SLUICE_API_TOKENS: full access to /v1, principals
	// "api-token:1", "api-token:2", … in their order.
	Tokens []string
	// AdminToken and AdminReadToken are the admin API's built-in roles.
	AdminToken, AdminReadToken string
	// OIDC verifies bearer JWTs (nil: none are accepted).
	OIDC *OIDC
	// Required refuses a request without credentials (401). Without it, such
	// a request is the Anonymous principal. Set when Tokens are given or
	// SLUICE_AUTH_REQUIRED is.
	Required bool
}

// Authenticator turns a request's Authorization header into its
// principal.
type Authenticator struct {
	keys     *Keys
	oidc     *OIDC
	static   []staticToken
	required bool
}

type staticToken struct {
	sum [sha256.Size]byte
	p   *Principal
}

// NewAuthenticator returns the authenticator of o.
func NewAuthenticator(o Options) *Authenticator {
	a := &Authenticator{keys: o.Keys, oidc: o.OIDC, required: o.Required}
	n := 0
	for _, t := range o.Tokens {
		if t == "" {
			continue
		}
		n++
		a.static = append(a.static, staticToken{sum: sha256.Sum256([]byte(t)), p: fullAccess("api-token:" + strconv.Itoa(n))})
	}
	if n > 0 {
		a.required = true
	}
	if o.AdminToken != "" {
		a.static = append(a.static, staticToken{sum: sha256.Sum256([]byte(o.AdminToken)), p: AdminOperator()})
	}
	if o.AdminReadToken != "" {
		a.static = append(a.static, staticToken{sum: sha256.Sum256([]byte(o.AdminReadToken)), p: AdminReader()})
	}
	return a
}

// Required reports whether a request without credentials is refused.
func (a *Authenticator) Required() bool { return a.required }

// Authenticate returns the principal of an Authorization header value:
// Anonymous for none when not required; ErrNoCredentials, ErrMalformed or
// ErrInvalid otherwise.
func (a *Authenticator) Authenticate(ctx context.Context, header string) (*Principal, error) {
	if header == "" {
		if a.required {
			return nil, ErrNoCredentials
		}
		return Anonymous, nil
	}
	tok, err := ParseAuthorization(header)
	if err != nil {
		return nil, err
	}
	if id, secret, ok := SplitKey(tok); ok && a.keys != nil {
		return a.keys.Lookup(ctx, id, secret)
	}
	// Every static token is compared, in constant time over SHA-256
	// digests (lengths do not leak), whichever matches.
	sum := sha256.Sum256([]byte(tok))
	var found *Principal
	for i := range a.static {
		if subtle.ConstantTimeCompare(sum[:], a.static[i].sum[:]) == 1 {
			found = a.static[i].p
		}
	}
	if found == nil && a.oidc != nil && LooksLikeJWT(tok) {
		return a.oidc.Verify(ctx, tok)
	}
	if found == nil {
		return nil, ErrInvalid
	}
	return found, nil
}

type principalKey struct{}

// WithPrincipal returns ctx carrying p.
func WithPrincipal(ctx context.Context, p *Principal) context.Context {
	return context.WithValue(ctx, principalKey{}, p)
}

// FromContext returns the principal ctx carries, or nil.
func FromContext(ctx context.Context) *Principal {
	p, _ := ctx.Value(principalKey{}).(*Principal)
	return p
}
