package client

import (
	"reflect"
	"slices"
	"testing"
)

// TestClientMethodsAreTheLedgerAPI keeps Client the library an application sees: ledgers
// (create, open, list, delete), its metadata store and Close. Requests addressed to one
// bookie (reading or copying an entry there, listing what it holds, choosing a
// replacement, recovering a ledger by its metadata) belong to repair tools and live on
// Repairer; a method added to Client fails here until it is added to the list on purpose.
func TestClientMethodsAreTheLedgerAPI(t *testing.T) {
	want := []string{"Close", "CreateLedger", "DeleteLedger", "ListLedgers", "OpenLedger", "Store"}
	typ := reflect.TypeFor[*Client]()
	var got []string
	for i := range typ.NumMethod() {
		got = append(got, typ.Method(i).Name)
	}
	if !slices.Equal(got, want) {
		t.Errorf("*Client's methods are %v, want %v (repair primitives go on Repairer)", got, want)
	}
	rep := reflect.TypeFor[*Repairer]()
	for _, m := range []string{"ReadEntryFrom", "ListEntriesFrom", "AddRecoveryTo", "NewCopier", "PickReplacement", "RecoverLedger"} {
		if _, ok := rep.MethodByName(m); !ok {
			t.Errorf("Repairer lacks %s", m)
		}
	}
}
