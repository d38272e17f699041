package api

// The drift check: openapi.yaml is the description of the API, types.go holds
// the Go wire types and docs/architecture.md lists the paths. These tests fail
// as soon as one of them changes without the others.

import (
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/lizard-build/lizard/internal/template"
)

// wireTypes maps each schema of openapi.yaml to the Go type it describes.
// Adding a wire type to types.go without a schema (or the other way round)
// fails TestEveryWireTypeHasASchema.
var wireTypes = map[string]reflect.Type{
	"Error":                  reflect.TypeFor[Error](),
	"DesktopScreen":          reflect.TypeFor[DesktopScreen](),
	"DesktopCursor":          reflect.TypeFor[DesktopCursor](),
	"DesktopMouseRequest":    reflect.TypeFor[DesktopMouseRequest](),
	"DesktopKeyboardRequest": reflect.TypeFor[DesktopKeyboardRequest](),
	"DesktopOpenRequest":     reflect.TypeFor[DesktopOpenRequest](),
	"DesktopLaunchRequest":   reflect.TypeFor[DesktopLaunchRequest](),
	"DesktopWindowList":      reflect.TypeFor[DesktopWindowList](),
	"DesktopWindow":          reflect.TypeFor[DesktopWindow](),
	"DesktopStreamRequest":   reflect.TypeFor[DesktopStreamRequest](),
	"DesktopViewer":          reflect.TypeFor[DesktopViewer](),
	"NodeDrain":              reflect.TypeFor[NodeDrain](),
	"SandboxMove":            reflect.TypeFor[SandboxMove](),
	"SandboxLeft":            reflect.TypeFor[SandboxLeft](),
	"NodeState":              reflect.TypeFor[NodeState](),
	"NodeList":               reflect.TypeFor[NodeList](),
	"NodeInfo":               reflect.TypeFor[NodeInfo](),
	"CreateSandboxRequest":   reflect.TypeFor[CreateSandboxRequest](),
	"Sandbox":                reflect.TypeFor[Sandbox](),
	"SandboxList":            reflect.TypeFor[SandboxList](),
	"SetTimeoutRequest":      reflect.TypeFor[SetTimeoutRequest](),
	"NetworkPolicy":          reflect.TypeFor[NetworkPolicy](),
	"HeaderRule":             reflect.TypeFor[HeaderRule](),
	"UpdateNetworkRequest":   reflect.TypeFor[UpdateNetworkRequest](),
	"NetworkLog":             reflect.TypeFor[NetworkLog](),
	"NetworkLogEntry":        reflect.TypeFor[NetworkLogEntry](),
	"Health":                 reflect.TypeFor[Health](),
	"ExecuteRequest":         reflect.TypeFor[ExecuteRequest](),
	"ExecuteEvent":           reflect.TypeFor[ExecuteEvent](),
	"Abort":                  reflect.TypeFor[Abort](),
	"Result":                 reflect.TypeFor[Result](),
	"ExecutionError":         reflect.TypeFor[ExecutionError](),
	"CreateContextRequest":   reflect.TypeFor[CreateContextRequest](),
	"Context":                reflect.TypeFor[Context](),
	"ContextList":            reflect.TypeFor[ContextList](),
	"ProcessRequest":         reflect.TypeFor[ProcessRequest](),
	"ProcessEvent":           reflect.TypeFor[ProcessEvent](),
	"ProcessStartRequest":    reflect.TypeFor[ProcessStartRequest](),
	"PtySize":                reflect.TypeFor[PtySize](),
	"ProcessInfo":            reflect.TypeFor[ProcessInfo](),
	"ProcessList":            reflect.TypeFor[ProcessList](),
	"ProcessStdinRequest":    reflect.TypeFor[ProcessStdinRequest](),
	"ProcessSignalRequest":   reflect.TypeFor[ProcessSignalRequest](),
	"ProcessOutputEvent":     reflect.TypeFor[ProcessOutputEvent](),
	"ProcessControl":         reflect.TypeFor[ProcessControl](),
	"EntryInfo":              reflect.TypeFor[EntryInfo](),
	"EntryList":              reflect.TypeFor[EntryList](),
	"FileEvent":              reflect.TypeFor[FileEvent](),
	"SandboxMetric":          reflect.TypeFor[SandboxMetric](),
	"SandboxMetrics":         reflect.TypeFor[SandboxMetrics](),
	"PauseRequest":           reflect.TypeFor[PauseRequest](),
	"ResumeRequest":          reflect.TypeFor[ResumeRequest](),
	"ForkRequest":            reflect.TypeFor[ForkRequest](),
	"Snapshot":               reflect.TypeFor[Snapshot](),
	"SnapshotList":           reflect.TypeFor[SnapshotList](),
	"SnapshotRequest":        reflect.TypeFor[SnapshotRequest](),
	"VolumeMount":            reflect.TypeFor[VolumeMount](),
	"SandboxVolume":          reflect.TypeFor[SandboxVolume](),
	"CreateVolumeRequest":    reflect.TypeFor[CreateVolumeRequest](),
	"Volume":                 reflect.TypeFor[Volume](),
	"VolumeList":             reflect.TypeFor[VolumeList](),
	"SetSecretRequest":       reflect.TypeFor[SetSecretRequest](),
	"Secret":                 reflect.TypeFor[Secret](),
	"SecretList":             reflect.TypeFor[SecretList](),
	"BuildTemplateRequest":   reflect.TypeFor[BuildTemplateRequest](),
	"TemplateRecipe":         reflect.TypeFor[TemplateRecipe](),
	"TemplateFile":           reflect.TypeFor[TemplateFile](),
	"RegistryAuth":           reflect.TypeFor[RegistryAuth](),
	"TemplateCommand":        reflect.TypeFor[TemplateCommand](),
	"TemplateStep":           reflect.TypeFor[TemplateStep](),
	"TemplateSymlink":        reflect.TypeFor[TemplateSymlink](),
	"TemplateNpm":            reflect.TypeFor[TemplateNpm](),
	"Template":               reflect.TypeFor[Template](),
	"TemplateList":           reflect.TypeFor[TemplateList](),
	"TemplateBuildEvent":     reflect.TypeFor[TemplateBuildEvent](),
	"Event":                  reflect.TypeFor[Event](),
	"EventData":              reflect.TypeFor[EventData](),
	"EventList":              reflect.TypeFor[EventList](),
	"CreateWebhookRequest":   reflect.TypeFor[CreateWebhookRequest](),
	"Webhook":                reflect.TypeFor[Webhook](),
	"WebhookList":            reflect.TypeFor[WebhookList](),
	"WebhookDelivery":        reflect.TypeFor[WebhookDelivery](),
	"WebhookAttempt":         reflect.TypeFor[WebhookAttempt](),
	"WebhookDeliveryList":    reflect.TypeFor[WebhookDeliveryList](),
}

// enumSchemas are schemas with no Go struct behind them: named string enums.
var enumSchemas = map[string]bool{"SandboxState": true, "EventType": true}

// enums ties each enum in openapi.yaml (schema, or schema.property) to the
// prefix of the Go constants that list its values in types.go.
var enums = map[string]string{
	"Error.code":                     "Code",
	"SandboxState":                   "State",
	"Sandbox.state":                  "State",
	"ExecuteEvent.type":              "Event",
	"Result.type":                    "ResultType",
	"CreateSandboxRequest.onTimeout": "OnTimeout",
	"TemplateBuildEvent.type":        "BuildEvent",
	"EventType":                      "Lifecycle",
	"WebhookDelivery.state":          "Delivery",
	"DesktopMouseRequest.action":     "Mouse",
	"DesktopMouseRequest.button":     "Button",
	"DesktopMouseRequest.direction":  "Scroll",
	"DesktopKeyboardRequest.action":  "Keyboard",
}

type schema struct {
	Ref                  string             `yaml:"$ref"`
	Type                 any                `yaml:"type"` // a string, or a list in OpenAPI 3.1
	Format               string             `yaml:"format"`
	Properties           map[string]*schema `yaml:"properties"`
	Required             []string           `yaml:"required"`
	Items                *schema            `yaml:"items"`
	AdditionalProperties *additional        `yaml:"additionalProperties"`
	Enum                 []string           `yaml:"enum"`
	Description          string             `yaml:"description"`
	BuiltinTemplates     []string           `yaml:"x-builtin-templates"`
}

// additional is additionalProperties: a schema for a map's values, or
// false for an object that takes no fields but its own.
type additional struct {
	*schema
	Closed bool // additionalProperties: false
}

func (a *additional) UnmarshalYAML(n *yaml.Node) error {
	var b bool
	if n.Kind == yaml.ScalarNode && n.Decode(&b) == nil {
		a.Closed = !b
		return nil
	}
	a.schema = new(schema)
	return n.Decode(a.schema)
}

type response struct {
	Ref     string `yaml:"$ref"`
	Content map[string]struct {
		Schema *schema `yaml:"schema"`
	} `yaml:"content"`
}

type operation struct {
	OperationID string               `yaml:"operationId"`
	Security    *[]map[string]any    `yaml:"security"`
	Responses   map[string]*response `yaml:"responses"`
}

type document struct {
	OpenAPI    string                          `yaml:"openapi"`
	Paths      map[string]map[string]yaml.Node `yaml:"paths"`
	Internal   map[string]map[string]yaml.Node `yaml:"x-internal-agent-endpoints"`
	Components struct {
		Schemas   map[string]*schema   `yaml:"schemas"`
		Responses map[string]*response `yaml:"responses"`
	} `yaml:"components"`
}

var httpMethods = []string{"get", "put", "post", "delete", "patch", "head", "options"}

func loadDocument(t *testing.T) (*document, *yaml.Node) {
	t.Helper()
	b, err := os.ReadFile("openapi.yaml")
	if err != nil {
		t.Fatalf("reading openapi.yaml: %v", err)
	}
	var d document
	if err := yaml.Unmarshal(b, &d); err != nil {
		t.Fatalf("parsing openapi.yaml: %v", err)
	}
	var root yaml.Node
	if err := yaml.Unmarshal(b, &root); err != nil {
		t.Fatalf("parsing openapi.yaml: %v", err)
	}
	if !strings.HasPrefix(d.OpenAPI, "3.1") {
		t.Fatalf("openapi = %q, want 3.1.x", d.OpenAPI)
	}
	return &d, &root
}

// operations returns the document's operations keyed "METHOD /path".
func operations(t *testing.T, d *document) map[string]*operation {
	t.Helper()
	ops := map[string]*operation{}
	for path, item := range d.Paths {
		for method, node := range item {
			if !slices.Contains(httpMethods, method) {
				continue // parameters, summary...
			}
			var op operation
			if err := node.Decode(&op); err != nil {
				t.Fatalf("decoding %s %s: %v", method, path, err)
			}
			ops[strings.ToUpper(method)+" "+path] = &op
		}
	}
	return ops
}

func schemaType(s *schema) string {
	switch v := s.Type.(type) {
	case string:
		return v
	case []any:
		// OpenAPI 3.1 nullable: [T, "null"].
		for _, x := range v {
			if x != "null" {
				return x.(string)
			}
		}
	}
	return ""
}

// jsonType is the OpenAPI type of a Go type, or "$ref:Name" for a struct that
// has its own schema.
func jsonType(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == reflect.TypeFor[time.Time]() {
		return "string"
	}
	if t == reflect.TypeFor[json.RawMessage]() {
		return "" // any JSON value: a schema without a type
	}
	if t == reflect.TypeFor[[]byte]() {
		return "string" // base64 (format: byte)
	}
	switch t.Kind() {
	case reflect.String:
		return "string"
	case reflect.Bool:
		return "boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "integer"
	case reflect.Float32, reflect.Float64:
		return "number"
	case reflect.Slice, reflect.Array:
		return "array"
	case reflect.Map:
		return "object"
	case reflect.Struct:
		return "$ref:" + t.Name()
	}
	return "unsupported " + t.String()
}

// propType is the same for a schema property, following $ref to named
// schemas and to enum schemas (which are strings).
func propType(d *document, s *schema) string {
	if s.Ref != "" {
		name := strings.TrimPrefix(s.Ref, "#/components/schemas/")
		if enumSchemas[name] {
			return schemaType(d.Components.Schemas[name])
		}
		return "$ref:" + name
	}
	return schemaType(s)
}

func TestSchemasMatchGoTypes(t *testing.T) {
	d, _ := loadDocument(t)
	for name, gt := range wireTypes {
		s, ok := d.Components.Schemas[name]
		if !ok {
			t.Errorf("openapi.yaml has no schema %s for api.%s", name, gt.Name())
			continue
		}
		if got := schemaType(s); got != "object" {
			t.Errorf("schema %s: type = %q, want object", name, got)
		}
		goFields := map[string]reflect.StructField{}
		var goRequired []string
		for f := range gt.Fields() {
			tag := f.Tag.Get("json")
			jname, opts, _ := strings.Cut(tag, ",")
			if jname == "-" || !f.IsExported() {
				continue
			}
			if jname == "" {
				jname = f.Name
			}
			goFields[jname] = f
			if o := strings.Split(opts, ","); !slices.Contains(o, "omitempty") && !slices.Contains(o, "omitzero") {
				goRequired = append(goRequired, jname)
			}
		}
		for jname, f := range goFields {
			p, ok := s.Properties[jname]
			if !ok {
				t.Errorf("schema %s lacks property %q (api.%s.%s)", name, jname, gt.Name(), f.Name)
				continue
			}
			want, got := jsonType(f.Type), propType(d, p)
			if got != want {
				t.Errorf("%s.%s: openapi type %q, Go type %s wants %q", name, jname, got, f.Type, want)
			}
			checkNested(t, d, name+"."+jname, f.Type, p)
			if isTime(f.Type) && p.Format != "date-time" {
				t.Errorf("%s.%s: format = %q, want date-time for %s", name, jname, p.Format, f.Type)
			}
		}
		for jname := range s.Properties {
			if _, ok := goFields[jname]; !ok {
				t.Errorf("schema %s has property %q that api.%s lacks", name, jname, gt.Name())
			}
		}
		sort.Strings(goRequired)
		gotRequired := slices.Clone(s.Required)
		sort.Strings(gotRequired)
		if !slices.Equal(gotRequired, goRequired) {
			t.Errorf("schema %s: required = %v, want %v (the Go fields without omitempty)", name, gotRequired, goRequired)
		}
	}
}

func isTime(t reflect.Type) bool {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t == reflect.TypeFor[time.Time]()
}

// checkNested compares array items and map values.
func checkNested(t *testing.T, d *document, where string, gt reflect.Type, p *schema) {
	t.Helper()
	for gt.Kind() == reflect.Pointer {
		gt = gt.Elem()
	}
	switch gt.Kind() {
	case reflect.Slice:
		if gt == reflect.TypeFor[json.RawMessage]() {
			return
		}
		if gt == reflect.TypeFor[[]byte]() {
			if p.Format != "byte" {
				t.Errorf("%s: format = %q, want byte (base64) for []byte", where, p.Format)
			}
			return
		}
		if p.Items == nil {
			t.Errorf("%s: array without items", where)
			return
		}
		if got, want := propType(d, p.Items), jsonType(gt.Elem()); got != want {
			t.Errorf("%s items: openapi type %q, want %q", where, got, want)
		}
	case reflect.Map:
		if gt.Key().Kind() != reflect.String {
			t.Errorf("%s: Go map key %s is not a string", where, gt.Key())
		}
		if p.AdditionalProperties == nil || p.AdditionalProperties.schema == nil {
			t.Errorf("%s: object without additionalProperties", where)
			return
		}
		if got, want := propType(d, p.AdditionalProperties.schema), jsonType(gt.Elem()); got != want {
			t.Errorf("%s values: openapi type %q, want %q", where, got, want)
		}
	}
}

// typesFile parses types.go, for what reflection cannot see: the list of
// declared types and the constants.
func typesFile(t *testing.T) *ast.File {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "types.go", nil, 0)
	if err != nil {
		t.Fatalf("parsing types.go: %v", err)
	}
	return f
}

func TestEveryWireTypeHasASchema(t *testing.T) {
	f := typesFile(t)
	declared := map[string]bool{}
	for _, decl := range f.Decls {
		g, ok := decl.(*ast.GenDecl)
		if !ok || g.Tok != token.TYPE {
			continue
		}
		for _, spec := range g.Specs {
			ts := spec.(*ast.TypeSpec)
			if _, isStruct := ts.Type.(*ast.StructType); isStruct && ts.Name.IsExported() {
				declared[ts.Name.Name] = true
			}
		}
	}
	for name := range declared {
		if _, ok := wireTypes[name]; !ok {
			t.Errorf("types.go declares %s but wireTypes (and so openapi.yaml) does not list it", name)
		}
	}
	for name := range wireTypes {
		if !declared[name] {
			t.Errorf("wireTypes lists %s, which types.go does not declare", name)
		}
	}
	d, _ := loadDocument(t)
	for name := range d.Components.Schemas {
		if _, ok := wireTypes[name]; !ok && !enumSchemas[name] {
			t.Errorf("openapi.yaml has schema %s with no Go type", name)
		}
	}
}

// constants returns the string constants of types.go whose names start with
// prefix and go on with an upper-case letter.
func constants(f *ast.File, prefix string) []string {
	var vals []string
	for _, decl := range f.Decls {
		g, ok := decl.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, spec := range g.Specs {
			vs := spec.(*ast.ValueSpec)
			for i, n := range vs.Names {
				rest, ok := strings.CutPrefix(n.Name, prefix)
				if !ok || rest == "" || rest[0] < 'A' || rest[0] > 'Z' || i >= len(vs.Values) {
					continue
				}
				lit, ok := vs.Values[i].(*ast.BasicLit)
				if !ok || lit.Kind != token.STRING {
					continue
				}
				v, _ := strconv.Unquote(lit.Value)
				vals = append(vals, v)
			}
		}
	}
	sort.Strings(vals)
	return vals
}

func TestEnumsMatchConstants(t *testing.T) {
	f := typesFile(t)
	d, _ := loadDocument(t)
	for where, prefix := range enums {
		name, prop, _ := strings.Cut(where, ".")
		s := d.Components.Schemas[name]
		if s != nil && prop != "" {
			s = s.Properties[prop]
		}
		if s == nil {
			t.Errorf("openapi.yaml has no %s", where)
			continue
		}
		got := slices.Clone(s.Enum)
		sort.Strings(got)
		want := constants(f, prefix)
		if len(want) == 0 {
			t.Errorf("types.go has no constants %s*", prefix)
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s enum = %v, want %v (constants %s* in types.go)", where, got, want, prefix)
		}
	}
}

func TestRefsResolve(t *testing.T) {
	d, root := loadDocument(t)
	var walk func(n *yaml.Node)
	walk = func(n *yaml.Node) {
		if n.Kind == yaml.MappingNode {
			for i := 0; i+1 < len(n.Content); i += 2 {
				if n.Content[i].Value == "$ref" {
					ref := n.Content[i+1].Value
					kind, name, _ := strings.Cut(strings.TrimPrefix(ref, "#/components/"), "/")
					ok := false
					switch kind {
					case "schemas":
						_, ok = d.Components.Schemas[name]
					case "responses":
						_, ok = d.Components.Responses[name]
					case "parameters":
						ok = componentExists(root, "parameters", name)
					}
					if !ok {
						t.Errorf("line %d: $ref %q does not resolve", n.Content[i+1].Line, ref)
					}
				}
			}
		}
		for _, c := range n.Content {
			walk(c)
		}
	}
	walk(root)
}

func componentExists(root *yaml.Node, kind, name string) bool {
	var doc struct {
		Components map[string]map[string]any `yaml:"components"`
	}
	if err := root.Decode(&doc); err != nil {
		return false
	}
	_, ok := doc.Components[kind][name]
	return ok
}

// TestErrorResponses checks that every operation documents its errors with
// the Error body, and that authenticated ones document 401.
func TestErrorResponses(t *testing.T) {
	d, _ := loadDocument(t)
	errorBody := func(r *response) bool {
		if r.Ref != "" {
			r = d.Components.Responses[strings.TrimPrefix(r.Ref, "#/components/responses/")]
		}
		if r == nil {
			return false
		}
		c, ok := r.Content["application/json"]
		return ok && c.Schema != nil && c.Schema.Ref == "#/components/schemas/Error"
	}
	for key, op := range operations(t, d) {
		if op.OperationID == "" {
			t.Errorf("%s has no operationId", key)
		}
		authenticated := op.Security == nil || len(*op.Security) > 0
		if _, ok := op.Responses["401"]; authenticated && !ok {
			t.Errorf("%s needs a key but does not document 401", key)
		}
		if _, ok := op.Responses["500"]; !ok {
			t.Errorf("%s does not document 500", key)
		}
		proxied := strings.Contains(key, "{sandboxId}/")
		for _, served := range []string{"/timeout", "/pause", "/resume", "/snapshots", "/fork", "/metrics", "/network", "/network/log"} {
			proxied = proxied && !strings.HasSuffix(key, served) // served by the server itself
		}
		if _, ok := op.Responses["502"]; proxied && !ok {
			t.Errorf("%s is proxied to the agent but does not document 502", key)
		}
		for status, r := range op.Responses {
			if status[0] == '1' || status[0] == '2' {
				continue
			}
			if !errorBody(r) {
				t.Errorf("%s %s: response body is not the Error schema", key, status)
			}
		}
	}
}

var (
	tableRow = regexp.MustCompile("^\\| `([A-Z]+) (/[^` ]*)` \\|")
	pathArg  = regexp.MustCompile(`\{[^}]*\}`)
)

// normalize drops the query and the names of path parameters, which the
// architecture page abbreviates ({id}, {ctx}).
func normalize(method, path string) string {
	path, _, _ = strings.Cut(path, "?")
	return method + " " + pathArg.ReplaceAllString(path, "{}")
}

// TestPathsMatchArchitecture checks that the tables of docs/architecture.md
// and the paths of openapi.yaml list the same operations. Agent paths are
// served through the proxy under /v1/sandboxes/{id}.
func TestPathsMatchArchitecture(t *testing.T) {
	b, err := os.ReadFile("../docs/architecture.md")
	if err != nil {
		t.Fatalf("reading docs/architecture.md: %v", err)
	}
	documented := map[string]bool{}
	prefix := ""
	for line := range strings.Lines(string(b)) {
		if strings.HasPrefix(line, "Served by the agent") {
			prefix = "/v1/sandboxes/{id}"
		}
		m := tableRow.FindStringSubmatch(line)
		if m == nil || strings.Contains(m[2], "<") {
			continue // not a row, or the proxy's catch-all row
		}
		documented[normalize(m[1], prefix+m[2])] = true
	}
	if len(documented) < 15 {
		t.Fatalf("found %d operations in docs/architecture.md, want at least 15: did its tables change shape?", len(documented))
	}
	d, _ := loadDocument(t)
	described := map[string]bool{}
	for key := range operations(t, d) {
		method, path, _ := strings.Cut(key, " ")
		described[normalize(method, path)] = true
	}
	for op := range documented {
		if !described[op] {
			t.Errorf("docs/architecture.md lists %s, openapi.yaml does not describe it", op)
		}
	}
	for op := range described {
		if !documented[op] {
			t.Errorf("openapi.yaml describes %s, docs/architecture.md does not list it", op)
		}
	}
}

// TestAgentPaths checks the proxy's list of agent paths against the spec:
// exactly the paths marked x-agent are forwarded, and the internal agent
// endpoints are declared apart and never among them.
func TestAgentPaths(t *testing.T) {
	d, _ := loadDocument(t)
	const prefix = "/v1/sandboxes/{sandboxId}"
	var spec []string
	for path, item := range d.Paths {
		if n, ok := item["x-agent"]; ok && n.Value == "true" {
			rest, ok := strings.CutPrefix(path, prefix)
			if !ok {
				t.Errorf("x-agent path %s is not under %s", path, prefix)
			}
			spec = append(spec, rest)
		}
	}
	slices.Sort(spec)
	proxied := slices.Sorted(slices.Values(AgentPublicPaths))
	if !slices.Equal(spec, proxied) {
		t.Errorf("x-agent paths in openapi.yaml = %v;\napi.AgentPublicPaths     = %v", spec, proxied)
	}
	var internal []string
	for path := range d.Internal {
		internal = append(internal, path)
		if slices.Contains(proxied, path) {
			t.Errorf("internal agent endpoint %s is forwarded by the proxy", path)
		}
	}
	slices.Sort(internal)
	if want := []string{AgentDiskPath, AgentHeapDumpPath, AgentHeapWaitPath, AgentReadyPath, AgentReseedPath, AgentTrustPath}; !slices.Equal(internal, want) {
		t.Errorf("x-internal-agent-endpoints = %v; want %v", internal, want)
	}
}

// TestRequestsClosedResponsesOpen checks the compatibility rule of the
// document's description: every request body schema refuses fields it does
// not list (the server and the agent decode with DisallowUnknownFields),
// and no response schema does (the server may add response fields, and
// clients ignore those they do not know). No request field is nullable
// (both refuse null).
func TestRequestsClosedResponsesOpen(t *testing.T) {
	d, root := loadDocument(t)
	requests := map[string]bool{}
	var walk func(n *yaml.Node, inRequest bool)
	walk = func(n *yaml.Node, inRequest bool) {
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if n.Kind == yaml.MappingNode && k.Value == "$ref" && inRequest {
				requests[strings.TrimPrefix(v.Value, "#/components/schemas/")] = true
			}
			walk(v, inRequest || (n.Kind == yaml.MappingNode && k.Value == "requestBody"))
		}
		if n.Kind == yaml.SequenceNode || n.Kind == yaml.DocumentNode {
			for _, c := range n.Content {
				walk(c, inRequest)
			}
		}
	}
	for i := 0; i+1 < len(root.Content[0].Content); i += 2 {
		if root.Content[0].Content[i].Value == "paths" {
			walk(root.Content[0].Content[i+1], false)
		}
	}
	// The server refuses unknown fields at every depth: schemas a request
	// body holds (VolumeMount in CreateSandboxRequest, TemplateRecipe in
	// BuildTemplateRequest) are requests too.
	for grew := true; grew; {
		grew = false
		for name := range requests {
			s := d.Components.Schemas[name]
			if s == nil {
				continue
			}
			for _, p := range s.Properties {
				for _, ref := range []*schema{p, p.Items} {
					if ref == nil || ref.Ref == "" {
						continue
					}
					if n := strings.TrimPrefix(ref.Ref, "#/components/schemas/"); !requests[n] {
						requests[n], grew = true, true
					}
				}
			}
		}
	}
	if len(requests) < 7 {
		t.Fatalf("found %d request body schemas (%v), want at least 7", len(requests), requests)
	}
	for name, s := range d.Components.Schemas {
		closed := s.AdditionalProperties != nil && s.AdditionalProperties.Closed
		switch {
		case requests[name] && !closed:
			t.Errorf("request schema %s: want additionalProperties: false", name)
		case !requests[name] && closed:
			t.Errorf("schema %s is not a request body but refuses unknown fields: responses must stay open", name)
		}
		if !requests[name] {
			continue
		}
		for pname, p := range s.Properties {
			if l, ok := p.Type.([]any); ok && slices.Contains(l, any("null")) {
				t.Errorf("request field %s.%s is nullable; the server refuses null", name, pname)
			}
		}
	}
}

func TestNullAt(t *testing.T) {
	tests := []struct {
		body, path string
		found      bool
	}{
		{`{}`, "", false},
		{`null`, "", true},
		{`{"envs":{"A":"1","B":null}}`, "envs.B", true},
		{`{"timeoutMs":null}`, "timeoutMs", true},
		{`{"args":["a",null]}`, "args.1", true},
		{`{"b":null,"a":null}`, "a", true},
		{`{"code":"x = None"}`, "", false},
		{`{not json`, "", false},
	}
	for _, tt := range tests {
		path, found := NullAt([]byte(tt.body))
		if path != tt.path || found != tt.found {
			t.Errorf("NullAt(%s) = %q, %v; want %q, %v", tt.body, path, found, tt.path, tt.found)
		}
	}
}

// TestTemplatesEnum checks that the spec lists the templates built into
// the server, no more, no fewer.
func TestTemplatesEnum(t *testing.T) {
	d, _ := loadDocument(t)
	got := slices.Clone(d.Components.Schemas["CreateSandboxRequest"].Properties["template"].BuiltinTemplates)
	want := slices.Clone(template.Names())
	sort.Strings(got)
	sort.Strings(want)
	if !slices.Equal(got, want) {
		t.Errorf("CreateSandboxRequest.template x-builtin-templates = %v, want the server's templates %v", got, want)
	}
	base := slices.Clone(d.Components.Schemas["TemplateRecipe"].Properties["base"].BuiltinTemplates)
	sort.Strings(base)
	if !slices.Equal(base, want) {
		t.Errorf("TemplateRecipe.base x-builtin-templates = %v, want the server's templates %v", base, want)
	}
}

func TestIntegralNumbers(t *testing.T) {
	tests := []struct{ in, want string }{
		{`{"count": 6}`, `{"count": 6}`},
		{`{"count":6.0}`, `{"count":6}`},
		{`{"timeoutMs":1e3,"cpus":1.5}`, `{"cpus":1.5,"timeoutMs":1000}`},
		{`{"code":"x = 6.0"}`, `{"code":"x = 6.0"}`},
		{`{"a":[2.0,{"b":-3.00}]}`, `{"a":[2,{"b":-3}]}`},
		{`{"big":1e30}`, `{"big":1e30}`},
		{`{"bad":6.0`, `{"bad":6.0`},
		{`{} {"a":1.0}`, `{} {"a":1.0}`},
	}
	for _, tt := range tests {
		if got := string(IntegralNumbers([]byte(tt.in))); got != tt.want {
			t.Errorf("IntegralNumbers(%s) = %s, want %s", tt.in, got, tt.want)
		}
	}
}

// TestPackageMapComplete keeps docs/architecture.md's package map whole: a
// newcomer finds every package of the module with code in it there (of
// internal/, cmd/, bench/, ...), by its path, with its one job. A package
// added without a line fails here.
func TestPackageMapComplete(t *testing.T) {
	b, err := os.ReadFile("../docs/architecture.md")
	if err != nil {
		t.Fatalf("reading docs/architecture.md: %v", err)
	}
	doc := string(b)
	err = filepath.WalkDir("..", func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		if p != ".." && strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "node_modules" || d.Name() == "dist" {
			return filepath.SkipDir
		}
		gos, _ := filepath.Glob(filepath.Join(p, "*.go"))
		code := false
		for _, g := range gos {
			if !strings.HasSuffix(g, "_test.go") {
				code = true
			}
		}
		rel := strings.TrimPrefix(filepath.ToSlash(p), "../")
		// Generated protocol packages are described with the package
		// that serves them.
		if !code || p == ".." || strings.Contains(rel, "/proto") {
			return nil
		}
		if !regexp.MustCompile(regexp.QuoteMeta(rel) + `\b`).MatchString(doc) {
			t.Errorf("docs/architecture.md does not name %s: add it to the package map with its one job", rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
