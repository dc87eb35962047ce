#pragma once
// The worked examples' registration (examples/README.md): what a user's own main() calls first.

namespace specdec::examples {

// Adds the example strategy `annealed` and the example drafter `repeat_last` to the registries.
// Call it once, before the registries are first read (at the start of main()).
void register_examples();

}  // namespace specdec::examples
