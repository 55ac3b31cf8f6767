package auth

import (
	"strings"
	"testing"
)

func TestPatternMatch(t *testing.T) {
	inst := func(id string) Resource { return Resource{Type: "Instance", ID: id} }
	cases := []struct {
		pattern string
		res     Resource
		want    bool
	}{
		{"*", inst("a:b:c"), true},
		{"*", Resource{}, true},
		{"db:orders", inst("orders:customer:1"), true},
		{"db:orders", inst("orders2:customer:1"), false},
		{"db:ord*", inst("orders:customer:1"), true},
		{"db:*s", inst("a:bs:c"), false}, // the glob is the db's, not the id's
		{"db:orders/customer", inst("orders:customer:x:y"), true},
		{"db:orders/customer", inst("orders:item:x"), false},
		{"db:orders/customer/eu-*", inst("orders:customer:eu-1"), true},
		{"db:orders/customer/eu-*", inst("orders:customer:us-1"), false},
		{"db:orders", Resource{Type: "Order", ID: "orders:a:b"}, false},
		{"db:orders", Resource{Type: "Instance", ID: "orders:customer:", Prefix: true}, true},
		{"db:orders/customer/eu-*", Resource{Type: "Instance", ID: "orders:customer:", Prefix: true}, true},
		{"db:orders/customer/eu-*", Resource{Type: "Instance", ID: "orders:item:", Prefix: true}, false},
		{"stream:Order", Resource{Type: "Order", ID: "anything/at:all"}, true},
		{"stream:Order", Resource{Type: "Orders", ID: "1"}, false},
		{"stream:Order/eu-*", Resource{Type: "Order", ID: "eu-7"}, true},
		{"stream:Order/eu-*", Resource{Type: "Order", ID: "us-7"}, false},
		{"stream:Order/eu-*", Resource{Type: "Order", Prefix: true}, true},
		{"stream:Ord*", Resource{Type: "Order", Prefix: true}, true},
		{"stream:Invoice", Resource{Type: "Order", Prefix: true}, false},
		{"stream:Instance/orders:*", inst("orders:c:1"), true},
		{"stream:*/a*b*c", Resource{Type: "X", ID: "aXbYc"}, true},
		{"stream:*/a*b*c", Resource{Type: "X", ID: "aXbYcd"}, false},
		{"stream:Order", Resource{}, false}, // admin resources: * only
	}
	for _, c := range cases {
		p, err := ParsePattern(c.pattern)
		if err != nil {
			t.Fatalf("%s: %v", c.pattern, err)
		}
		if got := p.Match(c.res); got != c.want {
			t.Errorf("%s matches %+v = %v, want %v", c.pattern, c.res, got, c.want)
		}
	}
}

func TestParsePatternRefuses(t *testing.T) {
	for _, s := range []string{"", "db:", "stream:", "db:a//b", "stream:A/", "stream:/x", "table:x", "orders", "db:a b",
		"db:a:b", "stream:A:B/x", strings.Repeat("x", MaxPatternLen+1), "db:\x00"} {
		if _, err := ParsePattern(s); err == nil {
			t.Errorf("ParsePattern(%q) accepted", s)
		}
	}
}

func TestParseGrant(t *testing.T) {
	g, err := ParseGrant("read,append,read=stream:Order/eu-*")
	if err != nil {
		t.Fatal(err)
	}
	if got := g.String(); got != "append,read=stream:Order/eu-*" {
		t.Errorf("String = %q", got)
	}
	if g, _ := ParseGrant("*=db:x"); len(g.Ops) != len(Operations) || g.String() != "*=db:x" {
		t.Errorf("* = %v", g.Ops)
	}
	for _, s := range []string{"read", "=db:x", "delete=db:x", "read=nope"} {
		if _, err := ParseGrant(s); err == nil {
			t.Errorf("ParseGrant(%q) accepted", s)
		}
	}
}

func TestPrincipalChecks(t *testing.T) {
	p := &Principal{Name: "team-a", Grants: mustGrants("append,read=stream:Order/a-*", "subscribe=db:a")}
	if err := p.Check(OpAppend, Resource{Type: "Order", ID: "a-1"}); err != nil {
		t.Error(err)
	}
	err := p.Check(OpAppend, Resource{Type: "Order", ID: "b-1"})
	if err == nil || err.Error() != "team-a lacks the permission append on stream:Order/b-1" {
		t.Errorf("denied: %v", err)
	}
	if p.AllowsAny(OpCommand) || !p.AllowsAny(OpSubscribe) {
		t.Error("AllowsAny")
	}
	var nobody *Principal
	if nobody.Allows(OpRead, Resource{Type: "X", ID: "y"}) {
		t.Error("nil principal allowed")
	}
	if Anonymous.AllowsAny(OpAdminRead) || !Anonymous.Allows(OpCommand, Resource{Type: "Instance", ID: "a:b:c"}) {
		t.Error("anonymous")
	}
	if !AdminOperator().Allows(OpAdminAct, Resource{}) || AdminReader().Allows(OpAdminAct, Resource{}) {
		t.Error("admin roles")
	}
}

func TestResourceString(t *testing.T) {
	for res, want := range map[Resource]string{
		{Type: "Instance", ID: "orders:customer:7"}:              "db:orders/customer/7",
		{Type: "Instance", ID: "orders:customer:", Prefix: true}: "db:orders/customer*",
		{Type: "Order", ID: "eu-1"}:                              "stream:Order/eu-1",
		{Type: "Order", Prefix: true}:                            "stream:Order",
		{}:                                                       "*",
	} {
		if got := res.String(); got != want {
			t.Errorf("%+v: %q, want %q", res, got, want)
		}
	}
}

func TestParseAuthorization(t *testing.T) {
	ok := map[string]string{
		"Bearer abc":                       "abc",
		"bearer   abc==":                   "abc==",
		"BEARER sluice_0123456789abcdef_x": "sluice_0123456789abcdef_x",
	}
	for h, want := range ok {
		if got, err := ParseAuthorization(h); err != nil || got != want {
			t.Errorf("%q: %q, %v", h, got, err)
		}
	}
	for _, h := range []string{"", "Bearer", "Bearer ", "Basic abc", "Bearer a b", "Bearer a=b", "Bearer =", "Bearer a\tb",
		"Bearerabc", "Bearer " + strings.Repeat("a", MaxTokenLen+1), "Bearer é"} {
		if got, err := ParseAuthorization(h); err == nil {
			t.Errorf("%q accepted as %q", h, got)
		}
	}
}

func TestSplitKey(t *testing.T) {
	if id, sec, ok := SplitKey("sluice_0123456789abcdef_se_cr-et"); !ok || id != "0123456789abcdef" || sec != "se_cr-et" {
		t.Errorf("%q %q %v", id, sec, ok)
	}
	for _, s := range []string{"sluice_0123_x", "sluice_0123456789abcdeg_x", "sluice_0123456789abcdef_", "key_0123456789abcdef_x"} {
		if _, _, ok := SplitKey(s); ok {
			t.Errorf("SplitKey(%q) accepted", s)
		}
	}
}

// CheckAdminScope lets an admin operation through on * only, or as part
// of every operation (the op *), however the grant's ops are spelled: six
// admin_act on a db are not every operation.
func TestCheckAdminScope(t *testing.T) {
	all := append([]Operation(nil), Operations...)
	six := make([]Operation, len(Operations))
	for i := range six {
		six[i] = OpAdminAct
	}
	tests := []struct {
		name string
		g    Grant
		ok   bool
	}{
		{"admin_act on *", Grant{Ops: []Operation{OpAdminAct}, Resource: "*"}, true},
		{"every operation on a db", Grant{Ops: all, Resource: "db:orders"}, true},
		{"every operation, one twice, on a db", Grant{Ops: append([]Operation{OpRead}, all...), Resource: "db:orders"}, true},
		{"read on a db", Grant{Ops: []Operation{OpRead}, Resource: "db:orders"}, true},
		{"admin_act on a db", Grant{Ops: []Operation{OpAdminAct}, Resource: "db:orders"}, false},
		{"admin_act as many times as there are operations", Grant{Ops: six, Resource: "db:orders"}, false},
		{"admin_read repeated with read", Grant{Ops: []Operation{OpRead, OpRead, OpRead, OpRead, OpAdminRead, OpAdminRead}, Resource: "stream:Order"}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := CheckAdminScope(tc.g); (err == nil) != tc.ok {
				t.Fatalf("CheckAdminScope(%v on %s): %v, want ok %t", tc.g.Ops, tc.g.Resource, err, tc.ok)
			}
		})
	}
}
