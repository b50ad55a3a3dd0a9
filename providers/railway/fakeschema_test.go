package railway

// The fake's reading of Railway's public GraphQL schema (Backboard,
// https://backboard.railway.com/graphql/v2), so that it refuses any
// operation, argument, input field, variable type or enum value Berth
// sends that the schema does not have. The schema is the one Railway
// answers at the endpoint's introspection, in the copy the Railway CLI
// ships and builds its queries from: github.com/railwayapp/cli,
// src/gql/schema.json at v5.43.1 (commit df3838b, 2026-08-21), read on
// 2026-12-01; its queries (src/gql/queries, src/gql/mutations) use the
// same operations.
//
// Root fields and input objects are listed whole, with every argument
// and input field the schema gives them and its type in the schema's
// notation ("String!", "[DeploymentStatus!]"). Object types list only the
// fields Berth selects: any other selection is refused, so that a new one
// needs its line here, checked against the schema first.

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"unicode"
)

// gqlField is a field of an object type: its arguments and its type.
type gqlField struct {
	args map[string]string
	typ  string
}

// connArgs are the paging arguments of a connection field.
var connArgs = map[string]string{"after": "String", "before": "String", "first": "Int", "last": "Int"}

var gqlObjects = map[string]map[string]gqlField{
	"Mutation": {
		"serviceCreate":         {args: map[string]string{"input": "ServiceCreateInput!"}, typ: "Service!"},
		"serviceInstanceUpdate": {args: map[string]string{"serviceId": "String!", "environmentId": "String", "input": "ServiceInstanceUpdateInput!"}, typ: "Boolean!"},
		"serviceInstanceDeploy": {args: map[string]string{"serviceId": "String!", "environmentId": "String!", "commitSha": "String", "latestCommit": "Boolean"}, typ: "Boolean!"},
		"serviceDomainCreate":   {args: map[string]string{"input": "ServiceDomainCreateInput!"}, typ: "ServiceDomain!"},
		"serviceDelete":         {args: map[string]string{"id": "String!", "environmentId": "String"}, typ: "Boolean!"},
	},
	"Query": {
		"deployments": {args: map[string]string{"input": "DeploymentListInput!", "after": "String", "before": "String", "first": "Int", "last": "Int"}, typ: "QueryDeploymentsConnection!"},
		"project":     {args: map[string]string{"id": "String!"}, typ: "Project!"},
		"variables":   {args: map[string]string{"projectId": "String!", "environmentId": "String!", "serviceId": "String", "unrendered": "Boolean"}, typ: "EnvironmentVariables!"},
	},
	"Service": {
		"id": {typ: "ID!"}, "name": {typ: "String!"},
		"serviceInstances": {args: connArgs, typ: "ServiceServiceInstancesConnection!"},
	},
	"ServiceServiceInstancesConnection":     {"edges": {typ: "[ServiceServiceInstancesConnectionEdge!]!"}},
	"ServiceServiceInstancesConnectionEdge": {"node": {typ: "ServiceInstance!"}},
	"ServiceInstance":                       {"environmentId": {typ: "String!"}, "domains": {typ: "AllDomains!"}},
	"AllDomains":                            {"serviceDomains": {typ: "[ServiceDomain!]!"}},
	"ServiceDomain":                         {"id": {typ: "ID!"}, "domain": {typ: "String!"}},
	"Project":                               {"services": {args: connArgs, typ: "ProjectServicesConnection!"}},
	"ProjectServicesConnection":             {"edges": {typ: "[ProjectServicesConnectionEdge!]!"}},
	"ProjectServicesConnectionEdge":         {"node": {typ: "Service!"}},
	"QueryDeploymentsConnection":            {"edges": {typ: "[QueryDeploymentsConnectionEdge!]!"}},
	"QueryDeploymentsConnectionEdge":        {"node": {typ: "Deployment!"}},
	"Deployment":                            {"id": {typ: "ID!"}, "status": {typ: "DeploymentStatus!"}},
}

var gqlInputs = map[string]map[string]string{
	"ServiceCreateInput": {
		"branch": "String", "environmentId": "String", "icon": "String", "name": "String",
		"projectId": "String!", "registryCredentials": "RegistryCredentialsInput",
		"source": "ServiceSourceInput", "templateId": "String", "templateServiceId": "String",
		"variables": "EnvironmentVariables",
	},
	"ServiceSourceInput":       {"image": "String", "repo": "String"},
	"RegistryCredentialsInput": {"password": "String!", "username": "String!"},
	"ServiceInstanceUpdateInput": {
		"buildCommand": "String", "builder": "Builder", "cronSchedule": "String",
		"dockerfilePath": "String", "drainingSeconds": "Int", "healthcheckPath": "String",
		"healthcheckTimeout": "Int", "ipv6EgressEnabled": "Boolean", "multiRegionConfig": "JSON",
		"nixpacksPlan": "JSON", "numReplicas": "Int", "overlapSeconds": "Int",
		"preDeployCommand": "[String!]", "railwayConfigFile": "String", "region": "String",
		"registryCredentials": "RegistryCredentialsInput", "restartPolicyMaxRetries": "Int",
		"restartPolicyType": "RestartPolicyType", "rootDirectory": "String",
		"sleepApplication": "Boolean", "source": "ServiceSourceInput", "startCommand": "String",
		"watchPatterns": "[String!]",
	},
	"DeploymentListInput": {
		"environmentId": "String", "includeDeleted": "Boolean", "projectId": "String",
		"serviceId": "String", "status": "DeploymentStatusInput",
	},
	"DeploymentStatusInput":    {"in": "[DeploymentStatus!]", "notIn": "[DeploymentStatus!]"},
	"ServiceDomainCreateInput": {"environmentId": "String!", "serviceId": "String!", "targetPort": "Int"},
}

var gqlEnums = map[string][]string{
	"RestartPolicyType": {"ALWAYS", "NEVER", "ON_FAILURE"},
	"DeploymentStatus": {"BUILDING", "CRASHED", "DEPLOYING", "FAILED", "INITIALIZING", "NEEDS_APPROVAL",
		"QUEUED", "REMOVED", "REMOVING", "SKIPPED", "SLEEPING", "SUCCESS", "WAITING"},
	"Builder": {"HEROKU", "NIXPACKS", "PAKETO", "RAILPACK"},
}

// gqlScalars are the scalars the listed types use. EnvironmentVariables
// is Railway's map of variable names to values.
var gqlScalars = []string{"String", "ID", "Int", "Boolean", "JSON", "EnvironmentVariables"}

// gqlDoc is a parsed operation: its kind, its variables' types and its
// root selections.
type gqlDoc struct {
	kind string
	vars map[string]string
	sel  []gqlSel
}

// gqlSel is one selected field, its arguments (a value is "$name" for a
// variable, else the literal's text) and its own selections.
type gqlSel struct {
	name string
	args map[string]string
	sel  []gqlSel
}

// schemaError is a document or variables the schema refuses; code is the
// error's extensions.code.
type schemaError struct{ code, msg string }

func (e *schemaError) Error() string { return e.msg }

func invalid(format string, a ...any) *schemaError {
	return &schemaError{code: "GRAPHQL_VALIDATION_FAILED", msg: fmt.Sprintf(format, a...)}
}

func badInput(format string, a ...any) *schemaError {
	return &schemaError{code: "BAD_USER_INPUT", msg: fmt.Sprintf(format, a...)}
}

// checkRequest parses query and checks it and vars against the schema.
func checkRequest(query string, vars map[string]any) (*gqlDoc, *schemaError) {
	d, err := parseGQL(query)
	if err != nil {
		return nil, &schemaError{code: "GRAPHQL_PARSE_FAILED", msg: "Syntax Error: " + err.Error()}
	}
	root := map[string]string{"query": "Query", "mutation": "Mutation"}[d.kind]
	if root == "" {
		return nil, invalid("operation type %q is not served", d.kind)
	}
	for v, t := range d.vars {
		if _, kind := typeKind(t); kind == "" || kind == "object" {
			return nil, invalid("Variable \"$%s\" cannot be of type %q: not an input type of the schema", v, t)
		}
	}
	used := map[string]bool{}
	if err := checkSelections(root, d.sel, d.vars, used); err != nil {
		return nil, err
	}
	for v := range d.vars {
		if !used[v] {
			return nil, invalid("Variable \"$%s\" is never used", v)
		}
	}
	for v := range vars {
		if _, ok := d.vars[v]; !ok {
			return nil, badInput("Variable \"$%s\" is not defined by the operation", v)
		}
	}
	for v, t := range d.vars {
		if err := checkValue("$"+v, vars[v], t); err != nil {
			return nil, err
		}
	}
	return d, nil
}

// typeKind returns t's named type and its kind: object, input, enum,
// scalar, or "" when the schema has no such type.
func typeKind(t string) (name, kind string) {
	name = strings.Trim(t, "[]!")
	switch {
	case gqlObjects[name] != nil:
		return name, "object"
	case gqlInputs[name] != nil:
		return name, "input"
	case gqlEnums[name] != nil:
		return name, "enum"
	case slices.Contains(gqlScalars, name):
		return name, "scalar"
	}
	return name, ""
}

func checkSelections(typ string, sels []gqlSel, vars map[string]string, used map[string]bool) *schemaError {
	if len(sels) == 0 {
		return invalid("Field of type %q must have a selection of subfields", typ)
	}
	for _, s := range sels {
		f, ok := gqlObjects[typ][s.name]
		if !ok {
			return invalid("Cannot query field %q on type %q", s.name, typ)
		}
		for a, v := range s.args {
			at, ok := f.args[a]
			if !ok {
				return invalid("Unknown argument %q on field \"%s.%s\"", a, typ, s.name)
			}
			if name, ok := strings.CutPrefix(v, "$"); ok {
				vt, ok := vars[name]
				if !ok {
					return invalid("Variable \"$%s\" is not defined", name)
				}
				used[name] = true
				if !typeFits(vt, at) {
					return invalid("Variable \"$%s\" of type %q used in position expecting type %q", name, vt, at)
				}
			} else if !literalFits(v, at) {
				return invalid("Argument %q of field %q has invalid value %s: want %s", a, s.name, v, at)
			}
		}
		for a, at := range f.args {
			if _, ok := s.args[a]; !ok && strings.HasSuffix(at, "!") {
				return invalid("Field %q argument %q of type %q is required, but it was not provided", s.name, a, at)
			}
		}
		name, kind := typeKind(f.typ)
		if kind == "object" {
			if err := checkSelections(name, s.sel, vars, used); err != nil {
				return err
			}
		} else if len(s.sel) > 0 {
			return invalid("Field %q must not have a selection since type %q has no subfields", s.name, f.typ)
		}
	}
	return nil
}

// typeFits reports whether a variable of type vt may stand where want is
// expected: the same type, where a non-null variable also fits a nullable
// place.
func typeFits(vt, want string) bool {
	for {
		switch {
		case vt == want:
			return true
		case strings.HasSuffix(vt, "!") && strings.HasSuffix(want, "!"):
			vt, want = strings.TrimSuffix(vt, "!"), strings.TrimSuffix(want, "!")
		case strings.HasSuffix(vt, "!") && !strings.HasSuffix(want, "!"):
			vt = strings.TrimSuffix(vt, "!")
		case strings.HasPrefix(vt, "[") && strings.HasPrefix(want, "[") && strings.HasSuffix(vt, "]") && strings.HasSuffix(want, "]"):
			vt, want = vt[1:len(vt)-1], want[1:len(want)-1]
		default:
			return false
		}
	}
}

// literalFits checks an argument's literal (Berth writes only numbers).
func literalFits(lit, want string) bool {
	switch strings.TrimSuffix(want, "!") {
	case "Int":
		_, err := fmt.Sscanf(lit, "%d", new(int))
		return err == nil && !strings.ContainsAny(lit, ".eE")
	case "Boolean":
		return lit == "true" || lit == "false"
	}
	return false
}

// checkValue checks a variable's JSON value v at path against type t.
func checkValue(path string, v any, t string) *schemaError {
	if v == nil {
		if strings.HasSuffix(t, "!") {
			return badInput("Variable %q of non-null type %q must not be null", path, t)
		}
		return nil
	}
	t = strings.TrimSuffix(t, "!")
	if strings.HasPrefix(t, "[") {
		list, ok := v.([]any)
		if !ok {
			return checkValue(path, v, t[1:len(t)-1]) // a single value stands for a one-item list
		}
		for i, x := range list {
			if err := checkValue(fmt.Sprintf("%s[%d]", path, i), x, t[1:len(t)-1]); err != nil {
				return err
			}
		}
		return nil
	}
	name, kind := typeKind(t)
	switch {
	case kind == "input":
		m, ok := v.(map[string]any)
		if !ok {
			return badInput("%s: Expected type %q to be an object", path, name)
		}
		fields := gqlInputs[name]
		for f, ft := range fields {
			if _, ok := m[f]; !ok && strings.HasSuffix(ft, "!") {
				return badInput("%s: Field %q of required type %q was not provided", path, f, ft)
			}
		}
		for f, x := range m {
			ft, ok := fields[f]
			if !ok {
				return badInput("%s: Field %q is not defined by type %q", path, f, name)
			}
			if err := checkValue(path+"."+f, x, ft); err != nil {
				return err
			}
		}
	case kind == "enum":
		if s, ok := v.(string); !ok || !slices.Contains(gqlEnums[name], s) {
			return badInput("%s: Value %v does not exist in %q enum", path, v, name)
		}
	case name == "String":
		if _, ok := v.(string); !ok {
			return badInput("%s: String cannot represent a non string value: %v", path, v)
		}
	case name == "ID":
		if _, ok := v.(string); !ok {
			if n, ok := v.(float64); !ok || n != math.Trunc(n) {
				return badInput("%s: ID cannot represent value: %v", path, v)
			}
		}
	case name == "Int":
		if n, ok := v.(float64); !ok || n != math.Trunc(n) || math.Abs(n) > math.MaxInt32 {
			return badInput("%s: Int cannot represent non-integer value: %v", path, v)
		}
	case name == "Boolean":
		if _, ok := v.(bool); !ok {
			return badInput("%s: Boolean cannot represent a non boolean value: %v", path, v)
		}
	case name == "EnvironmentVariables":
		m, ok := v.(map[string]any)
		if !ok {
			return badInput("%s: EnvironmentVariables must be an object of names to values", path)
		}
		for k, x := range m {
			if _, ok := x.(string); !ok {
				return badInput("%s: the value of %q is not a string", path, k)
			}
		}
	case name == "JSON":
	default:
		return badInput("%s: unknown type %q", path, t)
	}
	return nil
}

// parseGQL reads one operation of the GraphQL subset Berth writes:
// `query|mutation Name($v: Type, ...) { field(arg: $v|literal, ...) { ... } }`.
func parseGQL(src string) (*gqlDoc, error) {
	p := &gqlParser{toks: gqlTokens(src)}
	d := &gqlDoc{kind: p.next(), vars: map[string]string{}}
	if isName(p.peek()) {
		p.next()
	}
	if p.peek() == "(" {
		p.next()
		for p.peek() != ")" {
			if p.next() != "$" {
				return nil, fmt.Errorf("expected a variable at %q", p.peek())
			}
			v := p.next()
			if !isName(v) || p.next() != ":" {
				return nil, fmt.Errorf("expected a variable's type after $%s", v)
			}
			t, err := p.typ()
			if err != nil {
				return nil, err
			}
			if _, dup := d.vars[v]; dup {
				return nil, fmt.Errorf("there can be only one variable named $%s", v)
			}
			d.vars[v] = t
			if p.peek() == "" {
				return nil, fmt.Errorf("unterminated variable definitions")
			}
		}
		p.next()
	}
	sel, err := p.selections()
	if err != nil {
		return nil, err
	}
	if p.peek() != "" {
		return nil, fmt.Errorf("unexpected %q after the operation", p.peek())
	}
	d.sel = sel
	return d, nil
}

type gqlParser struct {
	toks []string
	i    int
}

func (p *gqlParser) peek() string {
	if p.i < len(p.toks) {
		return p.toks[p.i]
	}
	return ""
}

func (p *gqlParser) next() string { t := p.peek(); p.i++; return t }

func (p *gqlParser) typ() (string, error) {
	var t string
	if p.peek() == "[" {
		p.next()
		inner, err := p.typ()
		if err != nil {
			return "", err
		}
		if p.next() != "]" {
			return "", fmt.Errorf("unterminated list type")
		}
		t = "[" + inner + "]"
	} else if n := p.next(); isName(n) {
		t = n
	} else {
		return "", fmt.Errorf("expected a type at %q", n)
	}
	if p.peek() == "!" {
		p.next()
		t += "!"
	}
	return t, nil
}

func (p *gqlParser) selections() ([]gqlSel, error) {
	if p.next() != "{" {
		return nil, fmt.Errorf("expected a selection set")
	}
	var out []gqlSel
	for p.peek() != "}" {
		name := p.next()
		if !isName(name) {
			return nil, fmt.Errorf("expected a field name at %q", name)
		}
		s := gqlSel{name: name, args: map[string]string{}}
		if p.peek() == "(" {
			p.next()
			for p.peek() != ")" {
				a := p.next()
				if !isName(a) || p.next() != ":" {
					return nil, fmt.Errorf("expected an argument of %s", name)
				}
				v := p.next()
				if v == "$" {
					v = "$" + p.next()
				} else if v == "" || strings.ContainsAny(v, "{}()[]:") {
					return nil, fmt.Errorf("argument %s of %s: only variables and scalar literals are read", a, name)
				}
				if _, dup := s.args[a]; dup {
					return nil, fmt.Errorf("there can be only one argument named %q", a)
				}
				s.args[a] = v
			}
			p.next()
		}
		if p.peek() == "{" {
			sub, err := p.selections()
			if err != nil {
				return nil, err
			}
			s.sel = sub
		}
		out = append(out, s)
		if p.peek() == "" {
			return nil, fmt.Errorf("unterminated selection set")
		}
	}
	p.next()
	return out, nil
}

func isName(s string) bool {
	return s != "" && (unicode.IsLetter(rune(s[0])) || s[0] == '_')
}

// gqlTokens splits src into names, numbers, strings and punctuation;
// commas and white space separate, as in GraphQL.
func gqlTokens(src string) []string {
	var out []string
	for i := 0; i < len(src); {
		c := src[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == ',':
			i++
		case strings.IndexByte("{}()[]:$!=", c) >= 0:
			out = append(out, string(c))
			i++
		case c == '"':
			j := i + 1
			for j < len(src) && src[j] != '"' {
				if src[j] == '\\' {
					j++
				}
				j++
			}
			out = append(out, src[i:min(j+1, len(src))])
			i = j + 1
		default:
			j := i
			for j < len(src) && (unicode.IsLetter(rune(src[j])) || unicode.IsDigit(rune(src[j])) || strings.IndexByte("_-.+", src[j]) >= 0) {
				j++
			}
			if j == i {
				j++ // a character GraphQL does not have: its own token
			}
			out = append(out, src[i:j])
			i = j
		}
	}
	return out
}
