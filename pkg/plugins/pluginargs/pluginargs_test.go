package pluginargs

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/runtime"
)

type testArgs struct {
	Seconds *int64 `json:"seconds,omitempty"`
	Tiers   []struct {
		Name string `json:"name"`
	} `json:"tiers,omitempty"`
}

func TestDecode(t *testing.T) {
	// Every unknown field is reported with its path; the known ones are set all the same.
	var a testArgs
	strict, err := Decode(&runtime.Unknown{Raw: []byte(`{"seconds": 3, "second": 4, "tiers": [{"name": "leaf", "nmae": "x"}]}`)}, &a)
	require.NoError(t, err)
	require.Len(t, strict, 2)
	assert.EqualError(t, strict[0], `unknown field "second"`)
	assert.EqualError(t, strict[1], `unknown field "tiers[0].nmae"`)
	assert.Equal(t, int64(3), *a.Seconds)
	assert.Equal(t, "leaf", a.Tiers[0].Name)

	// YAML is decoded as strictly.
	a = testArgs{}
	strict, err = Decode(&runtime.Unknown{ContentType: runtime.ContentTypeYAML, Raw: []byte("seconds: 5\nSeconds: 6\n")}, &a)
	require.NoError(t, err)
	require.Len(t, strict, 1)
	assert.EqualError(t, strict[0], `unknown field "Seconds"`)
	assert.Equal(t, int64(5), *a.Seconds)

	// Nothing to decode leaves the args alone; what cannot be decoded at all is an error.
	a = testArgs{}
	for _, obj := range []runtime.Object{nil, &runtime.Unknown{}} {
		strict, err = Decode(obj, &a)
		assert.NoError(t, err)
		assert.Empty(t, strict)
	}
	_, err = Decode(&runtime.Unknown{Raw: []byte(`{"seconds": "three"}`)}, &a)
	assert.Error(t, err)
	_, err = Decode(&runtime.Unknown{Raw: []byte(`{}`), ContentType: "application/vnd.kubernetes.protobuf"}, &a)
	assert.ErrorContains(t, err, "not supported content type")
}
