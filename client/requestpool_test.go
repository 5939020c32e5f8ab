package client

import "testing"

// TestPoolRefusesRequestsWithoutWait: a request made outside the pool (no wait channel) and
// handed to putRequest never comes back out of getRequest. One did, from a test that gave the
// writer a new(request) to recycle: a later call got it, and the connection's reader that
// completed it blocked for good sending on its nil channel, so every later answer of that
// bookie went unread (TestBookieDiesMidStream's read of a restarted bookie hung for 60 s).
func TestPoolRefusesRequestsWithoutWait(t *testing.T) {
	for range 64 {
		putRequest(new(request))
	}
	for i := range 1024 {
		r := getRequest()
		if r.wait == nil {
			t.Fatalf("getRequest %d returned a request without a wait channel", i)
		}
		defer putRequest(r)
	}
}
