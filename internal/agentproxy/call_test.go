package agentproxy

import (
	"context"
	"testing"
)

func TestFollowing(t *testing.T) {
	if !Follows(Following(context.Background())) || Follows(context.Background()) {
		t.Error("Following does not mark a context, or an unmarked one reads as marked")
	}
}
