package esserver

import (
	"net/http"
	"sort"
	"strings"
)

func aliasNamePatterns(expr string) []string {
	names := splitComma(expr)
	for i, n := range names {
		if n == "_all" {
			names[i] = "*"
		}
	}
	return names
}

func (s *Server) handleGetAlias(rq *request, indexExpr, nameExpr string, hasName bool) response {
	s.mu.RLock()
	defer s.mu.RUnlock()
	var names []string
	if indexExpr == "" {
		for n := range s.indices {
			names = append(names, n)
		}
		sort.Strings(names)
	} else {
		o, err := s.resolveOptsFrom(rq, resolveOpts{allowNoIndices: true})
		if err != nil {
			return errResp(err)
		}
		names, err = s.resolveIndices(indexExpr, o)
		if err != nil {
			return errResp(err)
		}
	}
	patterns := aliasNamePatterns(nameExpr)
	found := map[string]bool{}
	out := map[string]any{}
	for _, n := range names {
		ix := s.indices[n]
		aliases := map[string]any{}
		for an, meta := range ix.aliases {
			if hasName && !pathMatchesAny(an, patterns) {
				continue
			}
			aliases[an] = meta.render()
			found[an] = true
		}
		if hasName && len(aliases) == 0 {
			continue
		}
		out[n] = map[string]any{"aliases": aliases}
	}
	var missing []string
	if hasName {
		for _, p := range patterns {
			if strings.Contains(p, "*") || strings.HasPrefix(p, "-") {
				continue
			}
			if !found[p] {
				missing = append(missing, p)
			}
		}
	}
	if len(missing) > 0 {
		sort.Strings(missing)
		msg := "alias [" + missing[0] + "] missing"
		if len(missing) > 1 {
			msg = "aliases [" + strings.Join(missing, ",") + "] missing"
		}
		out["error"] = msg
		out["status"] = http.StatusNotFound
		return response{http.StatusNotFound, out}
	}
	if rq.method == http.MethodHead && hasName && len(found) == 0 {
		return response{http.StatusNotFound, nil}
	}
	return ok(out)
}

func (s *Server) handlePutAlias(rq *request, indexExpr, name string) response {
	body, err := decodeOwnedObject(rq.body)
	if err != nil {
		return errResp(err)
	}
	// The body may repeat index/alias; drop them before parsing the rest.
	if body != nil {
		delete(body, "index")
		delete(body, "alias")
	}
	alias, derr := resolveDateMathName(name, s.now())
	if derr != nil {
		return errResp(errInvalidAliasName(name, derr.Error()))
	}
	if err := validateAliasName(alias); err != nil {
		return errResp(err)
	}
	var raw any
	if body != nil {
		raw = body
	}
	meta, err := parseAliasBody(alias, raw, false)
	if err != nil {
		return errResp(err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	names, err := s.resolveIndices(indexExpr, resolveOpts{})
	if err != nil {
		return errResp(err)
	}
	if s.indices[alias] != nil {
		return errResp(errInvalidAliasName(alias, "an index or data stream exists with the same name as the alias"))
	}
	for _, n := range names {
		if err := s.checkWriteIndexUnique(alias, n, meta); err != nil {
			return errResp(err)
		}
	}
	for _, n := range names {
		m := *meta
		s.indices[n].aliases[alias] = &m
		s.journalMeta(s.indices[n])
	}
	return ok(newOrderedMap().Set("acknowledged", true))
}

func errAliasesMissing(names []string) *esError {
	sort.Strings(names)
	msg := "aliases [" + strings.Join(names, ",") + "] missing"
	return newErr(http.StatusNotFound, "aliases_not_found_exception", "%s", msg).
		with("resource.type", "aliases").with("resource.id", strings.Join(names, ","))
}

func (s *Server) handleDeleteAlias(rq *request, indexExpr, nameExpr string) response {
	s.mu.Lock()
	defer s.mu.Unlock()
	names, err := s.resolveIndices(indexExpr, resolveOpts{})
	if err != nil {
		return errResp(err)
	}
	patterns := aliasNamePatterns(nameExpr)
	removed := 0
	for _, n := range names {
		ix := s.indices[n]
		before := removed
		for an := range ix.aliases {
			if pathMatchesAny(an, patterns) {
				delete(ix.aliases, an)
				removed++
			}
		}
		if removed > before {
			s.journalMeta(ix)
		}
	}
	if removed == 0 {
		return errResp(errAliasesMissing(patterns))
	}
	return ok(newOrderedMap().Set("acknowledged", true))
}

// handleUpdateAliases applies POST /_aliases actions atomically: every
// action works on a copy of the alias tables (aliasUpdate), and the copy
// replaces them only when every action and the final state are valid.
func (s *Server) handleUpdateAliases(rq *request) response {
	body, err := decodeOwnedObject(rq.body)
	if err != nil {
		return errResp(err)
	}
	rawActions, ok2 := body["actions"].([]any)
	for k := range body {
		if k != "actions" {
			return errResp(errParsing("[aliases] unknown field [%s]", k))
		}
	}
	if !ok2 || len(rawActions) == 0 {
		return errResp(errValidation("No action specified"))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	u := s.newAliasUpdate()
	for _, ra := range rawActions {
		am, ok := ra.(map[string]any)
		if !ok || len(am) != 1 {
			return errResp(errParsing("[aliases] failed to parse field [actions]"))
		}
		for action, defV := range am {
			def, ok := defV.(map[string]any)
			if !ok {
				return errResp(errParsing("[%s] failed to parse action", action))
			}
			if err := u.apply(action, def); err != nil {
				return errResp(err)
			}
		}
	}
	if err := u.check(); err != nil {
		return errResp(err)
	}
	u.commit()
	return ok(newOrderedMap().Set("acknowledged", true).Set("errors", false))
}

// aliasUpdate is one POST /_aliases in progress, under s.mu: a copy of
// every index's alias table, which the actions change, and the indices
// the actions remove.
type aliasUpdate struct {
	s          *Server
	state      map[string]map[string]*aliasMeta
	removedIdx map[string]bool
}

func (s *Server) newAliasUpdate() *aliasUpdate {
	state := map[string]map[string]*aliasMeta{}
	for n, ix := range s.indices {
		m := make(map[string]*aliasMeta, len(ix.aliases))
		for k, v := range ix.aliases {
			m[k] = v
		}
		state[n] = m
	}
	return &aliasUpdate{s: s, state: state, removedIdx: map[string]bool{}}
}

// live reports whether index n exists and no earlier action removed it.
func (u *aliasUpdate) live(n string) bool { return u.s.indices[n] != nil && !u.removedIdx[n] }

// apply applies one action (add, remove, remove_index) with its
// definition to the copy.
func (u *aliasUpdate) apply(action string, def map[string]any) *esError {
	indexExprs := collectNames(def, "index", "indices")
	aliasExprs := collectNames(def, "alias", "aliases")
	mustExist := true
	if v, ok := def["must_exist"].(bool); ok {
		mustExist = v
	}
	extra := map[string]any{}
	for k, v := range def {
		switch k {
		case "index", "indices", "alias", "aliases", "must_exist":
		default:
			extra[k] = v
		}
	}
	if len(indexExprs) == 0 {
		return errValidation("One of [index] or [indices] is required")
	}
	targets, err := u.targets(action, indexExprs)
	if err != nil {
		return err
	}
	switch action {
	case "add":
		if len(aliasExprs) == 0 {
			return errValidation("One of [alias] or [aliases] is required")
		}
		return u.add(targets, aliasExprs, extra)
	case "remove":
		if len(aliasExprs) == 0 {
			return errValidation("One of [alias] or [aliases] is required")
		}
		if missing := u.remove(targets, aliasExprs); len(missing) > 0 && mustExist {
			return errAliasesMissing(missing)
		}
	case "remove_index":
		for _, t := range targets {
			u.removedIdx[t] = true
		}
	default:
		return errParsing("[alias_action] unknown field [%s]", action)
	}
	return nil
}

// targets resolves an action's index expressions (date math, wildcards,
// _all, and for add and remove an alias standing for its indices) to the
// live indices they name, sorted.
func (u *aliasUpdate) targets(action string, indexExprs []string) ([]string, *esError) {
	s := u.s
	var targets []string
	for _, ie := range indexExprs {
		resolvedName, derr := resolveDateMathName(ie, s.now())
		if derr != nil {
			return nil, errIllegalArgument("%s", derr.Error())
		}
		if strings.Contains(resolvedName, "*") || resolvedName == "_all" {
			for n := range s.indices {
				if u.live(n) && globMatch(strings.ReplaceAll(resolvedName, "_all", "*"), n) {
					targets = append(targets, n)
				}
			}
			continue
		}
		if !u.live(resolvedName) {
			if action == "remove_index" && len(s.aliasIndices(resolvedName)) > 0 {
				return nil, errIllegalArgument("The provided expression [%s] matches an alias, specify the corresponding concrete indices instead.", resolvedName)
			}
			if action == "add" || action == "remove" {
				// An alias in the index position resolves to its indices.
				al := s.aliasIndices(resolvedName)
				if len(al) > 0 {
					targets = append(targets, al...)
					continue
				}
			}
			return nil, errIndexNotFound(resolvedName)
		}
		targets = append(targets, resolvedName)
	}
	sort.Strings(targets)
	return targets, nil
}

// add points each alias of aliasExprs (date math resolved) at every
// target, with the alias's definition (filter, routing, is_write_index…).
func (u *aliasUpdate) add(targets, aliasExprs []string, extra map[string]any) *esError {
	for _, ae := range aliasExprs {
		alias, derr := resolveDateMathName(ae, u.s.now())
		if derr != nil {
			return errInvalidAliasName(ae, derr.Error())
		}
		if err := validateAliasName(alias); err != nil {
			return err
		}
		meta, err := parseAliasBody(alias, extra, false)
		if err != nil {
			return err
		}
		for _, t := range targets {
			m := *meta
			u.state[t][alias] = &m
		}
	}
	return nil
}

// remove removes the aliases matching each pattern of aliasExprs from the
// targets, and returns the patterns that matched none.
func (u *aliasUpdate) remove(targets, aliasExprs []string) (missing []string) {
	for _, ae := range aliasExprs {
		hit := false
		for _, t := range targets {
			for an := range u.state[t] {
				if globMatch(ae, an) {
					delete(u.state[t], an)
					hit = true
				}
			}
		}
		if !hit {
			missing = append(missing, ae)
		}
	}
	return missing
}

// check validates the final state: no alias named like a live index, at
// most one write index per alias.
func (u *aliasUpdate) check() *esError {
	for n, aliases := range u.state {
		if u.removedIdx[n] {
			continue
		}
		for an := range aliases {
			if u.live(an) {
				return errInvalidAliasName(an, "an index or data stream exists with the same name as the alias")
			}
		}
	}
	writers := map[string][]string{}
	for n, aliases := range u.state {
		if u.removedIdx[n] {
			continue
		}
		for an, m := range aliases {
			if m.isWriteIndex != nil && *m.isWriteIndex {
				writers[an] = append(writers[an], n)
			}
		}
	}
	for an, ws := range writers {
		if len(ws) > 1 {
			sort.Strings(ws)
			return errIllegalArgument("alias [%s] has more than one write index [%s]", an, strings.Join(ws, ","))
		}
	}
	return nil
}

// commit drops the removed indices and installs the new alias tables,
// journalling what changed.
func (u *aliasUpdate) commit() {
	s := u.s
	for n := range u.removedIdx {
		delete(s.indices, n)
		s.journalDrop(n)
	}
	for n, aliases := range u.state {
		if ix := s.indices[n]; ix != nil {
			changed := aliasesChanged(ix.aliases, aliases)
			ix.aliases = aliases
			if changed {
				s.journalMeta(ix)
			}
		}
	}
}

func collectNames(def map[string]any, single, plural string) []string {
	var out []string
	if v, ok := def[single]; ok {
		l, _ := stringList(v)
		if s, isStr := v.(string); isStr {
			l = []string{s}
		}
		out = append(out, l...)
	}
	if v, ok := def[plural]; ok {
		l, _ := stringList(v)
		if s, isStr := v.(string); isStr {
			l = []string{s}
		}
		out = append(out, l...)
	}
	return out
}
