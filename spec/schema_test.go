package spec

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

var (
	schemaOnce sync.Once
	schema     *jsonschema.Schema
	schemaErr  error
)

// validateSchema checks a config.json against the runtime-spec JSON schema
// shipped in the runtime-spec module.
func validateSchema(config []byte) error {
	schemaOnce.Do(func() {
		out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/opencontainers/runtime-spec").Output()
		if err != nil {
			schemaErr = fmt.Errorf("locate the runtime-spec module: %w", err)
			return
		}
		dir := strings.TrimSpace(string(out))
		c := jsonschema.NewCompiler()
		// The schema files that omit $schema are draft-04, like the rest.
		c.DefaultDraft(jsonschema.Draft4)
		c.UseLoader(jsonschema.SchemeURLLoader{"file": specSchemaLoader{}})
		schema, schemaErr = c.Compile(filepath.Join(dir, "schema", "config-schema.json"))
	})
	if schemaErr != nil {
		return schemaErr
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(config))
	if err != nil {
		return err
	}
	return schema.Validate(doc)
}

// specSchemaLoader reads the runtime-spec schema files, whose references
// write JSON pointers without the leading slash ("defs.json#definitions/x");
// it restores the slash so a strict validator can follow them.
type specSchemaLoader struct{}

func (specSchemaLoader) Load(url string) (any, error) {
	data, err := os.ReadFile(strings.TrimPrefix(url, "file://"))
	if err != nil {
		return nil, err
	}
	data = bytes.ReplaceAll(data, []byte(`#definitions/`), []byte(`#/definitions/`))
	return jsonschema.UnmarshalJSON(bytes.NewReader(data))
}

// TestSchemaRejects makes sure the schema check can fail.
func TestSchemaRejects(t *testing.T) {
	for name, config := range map[string]string{
		"no ociVersion":   `{"root": {"path": "rootfs"}}`,
		"mapping as text": `{"ociVersion": "1.0.0", "linux": {"uidMappings": "0:3000000:1"}}`,
		"negative pids":   `{"ociVersion": "1.0.0", "process": {"cwd": "/", "args": ["sh"], "user": {"uid": -1, "gid": 0}}}`,
	} {
		if err := validateSchema([]byte(config)); err == nil {
			t.Errorf("%s: the schema accepted %s", name, config)
		}
	}
}
