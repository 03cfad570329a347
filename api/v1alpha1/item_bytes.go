/*
Copyright 2026 The Cachet Authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

// The size of an item in cachetd's memory. It lives here, not in
// internal/engine (which imports this package), because the webhook must
// judge a profile's value sizes the way the engine stores them: an item
// is refused when its key, value and header exceed -I, not its value
// alone. internal/engine derives slab classes with the same function and
// its contract test pins it to the engine. Pure functions, no state.

package v1alpha1

const (
	// ItemFixedBytes is the item header (19) and CAS (8): the smallest
	// chunk is this plus -n, 8-byte aligned.
	ItemFixedBytes = 27
	// Tail fields an item may carry besides the CAS (engine/src/
	// storage_internal.h item_tail_size): client flags when nonzero, the
	// expiry with a TTL, and a reference count on values over
	// ItemRefMinBytes.
	ItemFlagsBytes  = 4
	ItemExpiryBytes = 4
	ItemRefBytes    = 4
	ItemRefMinBytes = 1024
	// DefaultProfileKeyBytes is the key length of a profile that names
	// neither a preset with one nor keyBytes.
	DefaultProfileKeyBytes = 32
)

// ItemBytes is the chunk space an item of this key and value size takes,
// 8-byte aligned (cachetd's item_ntotal_for): header, CAS, key, value, and
// the flags, expiry and reference count when it has them.
func ItemBytes(keyBytes, valueBytes int64, flags, ttl bool) int64 {
	n := ItemFixedBytes + keyBytes + valueBytes
	if flags {
		n += ItemFlagsBytes
	}
	if ttl {
		n += ItemExpiryBytes
	}
	if valueBytes > ItemRefMinBytes {
		n += ItemRefBytes
	}
	return (n + 7) &^ 7
}

// maxValueBytes is the largest value whose item fits in itemMax bytes with
// this key, for the webhook's message; 0 when even an empty one does not.
func maxValueBytes(keyBytes, itemMax int64, flags, ttl bool) int64 {
	lo, hi := int64(0), itemMax
	if ItemBytes(keyBytes, 0, flags, ttl) > itemMax {
		return 0
	}
	for lo < hi {
		mid := (lo + hi + 1) / 2
		if ItemBytes(keyBytes, mid, flags, ttl) <= itemMax {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	return lo
}
