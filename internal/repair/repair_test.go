package repair_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/bookie-go/bookie/client"
	"github.com/bookie-go/bookie/internal/repair"
	"github.com/bookie-go/bookie/meta"
	"github.com/bookie-go/bookie/meta/metatest"
)

// New reaches the primitives package client handed over in its init, and they act on that
// Client: with no bookie registered, a replacement cannot be picked, and the error is the
// client's own.
func TestNewActsOnTheClient(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cl, err := client.New(ctx, client.Config{Store: metatest.NewStore(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	_, err = repair.New(cl).PickReplacement(ctx, []meta.BookieID{"127.0.0.1:1", "127.0.0.1:2"}, 0, 2)
	if !errors.Is(err, client.ErrNotEnoughBookies) {
		t.Fatalf("PickReplacement with no bookie registered: %v, want client.ErrNotEnoughBookies", err)
	}
}
