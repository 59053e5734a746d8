package dev.tpcomm

/**
 * tpcomm could not allocate native host memory for a tensor without going over its budget of
 * native memory, even after reclaiming what the program forgot: before throwing, the allocator
 * ran a garbage collection and waited (briefly, with bounded retries) for the cleaners of
 * unreachable tensors to give their memory back, and returned every idle slab of its pool.
 *
 * What is left is held by tensors the program can still reach and has not closed. The message
 * names the budget and where it came from, the bytes held by size class, and the two fixes:
 * close the tensors you no longer need (`close()`, or `use { }`), or raise the budget with
 * `-Dtpcomm.memory.budget=<size>` or the environment variable `TPCOMM_MEMORY_BUDGET=<size>`
 * (for example `2g`). See docs/memory.md.
 *
 * Thrown by the call that allocates (`Tensor.zeros`, `Tensor.of`, `copy`, an output a collective
 * allocates); nothing was allocated, and the pool stays usable: a later allocation succeeds once
 * memory was freed.
 *
 * @property budgetBytes the budget, in bytes.
 * @property heldBytes bytes of the budget held when the allocation gave up (slabs of the pool,
 * in use or not, and tensors with an arena of their own).
 * @property requestedBytes the bytes the failed allocation asked the budget for (a whole slab for
 * a pooled tensor, the tensor's size for a large one).
 */
public class NativeMemoryBudgetException(
    message: String,
    public val budgetBytes: Long,
    public val heldBytes: Long,
    public val requestedBytes: Long,
) : RuntimeException(message)
