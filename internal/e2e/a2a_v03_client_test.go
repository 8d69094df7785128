package e2e

// The A2A server's refusals read by a real v0.3 client: the released
// github.com/a2aproject/a2a-go v0.3 library, not the v2 module's compat
// transport (which also reads the v1.0 error shape and so proves nothing
// here).

import (
	"errors"
	"net/http"
	"testing"
	"time"

	a2a03 "github.com/a2aproject/a2a-go/a2a"
	a2aclient03 "github.com/a2aproject/a2a-go/a2aclient"
	"github.com/a2aproject/a2a-go/a2aclient/agentcard"
)

// bearerTransport adds a user key to every request of the v0.3 client.
type bearerTransport struct{ key string }

func (b bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.key)
	return http.DefaultTransport.RoundTrip(r)
}

func TestA2AServerRefusalsReadByV03Client(t *testing.T) {
	s := startServer(t, "sqlite:"+t.TempDir()+"/a.db")
	registerA2A(t, s, "echoer", newScriptedAgent(t, modeStream, 1).URL, nil)
	ctx := ctxTimeout(t, 30*time.Second)
	card, err := agentcard.DefaultResolver.Resolve(ctx, s.URL+"/a2a/echoer")
	if err != nil {
		t.Fatal(err)
	}
	dial := func(key string) *a2aclient03.Client {
		c, err := a2aclient03.NewFromCard(ctx, card, a2aclient03.WithJSONRPCTransport(&http.Client{Transport: bearerTransport{key}}))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Destroy() })
		return c
	}
	alice, bob := dial("alice-key"), dial("bob-key")

	// A task alice can work with reads as before.
	res, err := alice.SendMessage(ctx, &a2a03.MessageSendParams{Message: a2a03.NewMessage(a2a03.MessageRoleUser, a2a03.TextPart{Text: "hello"})})
	task, ok := res.(*a2a03.Task)
	if err != nil || !ok || task.Status.State != a2a03.TaskStateCompleted {
		t.Fatalf("message/send: %#v, %v", res, err)
	}

	// A2A's own errors: told apart by their sentinel.
	_, err = alice.GetTask(ctx, &a2a03.TaskQueryParams{ID: "int_missing"})
	if !errors.Is(err, a2a03.ErrTaskNotFound) {
		t.Errorf("tasks/get of an unknown task: %v, want ErrTaskNotFound", err)
	}
	_, err = alice.CancelTask(ctx, &a2a03.TaskIDParams{ID: task.ID})
	if !errors.Is(err, a2a03.ErrTaskNotCancelable) {
		t.Errorf("tasks/cancel of an ended task: %v, want ErrTaskNotCancelable", err)
	}

	// The platform's refusals (bob writing into alice's context): the code
	// in the error's details, blocking and streaming alike.
	msg := a2a03.NewMessage(a2a03.MessageRoleUser, a2a03.TextPart{Text: "hi"})
	msg.ContextID = task.ContextID
	_, err = bob.SendMessage(ctx, &a2a03.MessageSendParams{Message: msg})
	wantRefusal(t, "message/send", err, "session_not_found")
	var streamErr error
	for _, err := range bob.SendStreamingMessage(ctx, &a2a03.MessageSendParams{Message: msg}) {
		if err != nil {
			streamErr = err
			break
		}
	}
	wantRefusal(t, "message/stream", streamErr, "session_not_found")
}

func wantRefusal(t *testing.T, what string, err error, code string) {
	t.Helper()
	var ae *a2a03.Error
	if !errors.As(err, &ae) || ae.Details["code"] != code || !errors.Is(err, a2a03.ErrInvalidParams) {
		t.Errorf("%s: %v (details %#v), want an invalid-params error with code %s", what, err, detailsOf(ae), code)
	}
}

func detailsOf(e *a2a03.Error) map[string]any {
	if e == nil {
		return nil
	}
	return e.Details
}
