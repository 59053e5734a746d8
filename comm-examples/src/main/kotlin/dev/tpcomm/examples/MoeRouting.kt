package dev.tpcomm.examples

import dev.tpcomm.Communicator
import dev.tpcomm.DType
import dev.tpcomm.Tensor
import java.lang.foreign.MemorySegment

/**
 * Mixture-of-experts token routing with [Communicator.allToAllV], the exchange every expert-parallel
 * MoE layer does twice per step (Megatron-LM's `MoEAlltoAllTokenDispatcher`, DeepSpeed-MoE,
 * torchcomms' `all_to_all_v`):
 *
 * 1. each rank routes its tokens to experts (here: a given expert id per token); expert `e` lives on
 *    rank `e / expertsPerRank`;
 * 2. **permute**: the tokens are sorted by destination rank, so the rows for rank `j` are contiguous;
 *    `inputSplits[j]` is how many go to rank `j`;
 * 3. the ranks exchange the counts (one [Communicator.allToAll] of one `Int64` per rank: PyTorch's
 *    `all_to_all_single` of the split sizes), so each knows its `outputSplits`;
 * 4. **dispatch**: `allToAllV(tokens, inputSplits, outputSplits)` (and the expert ids alongside);
 * 5. each rank runs its experts on the rows it received;
 * 6. **combine**: `allToAllV(results, outputSplits, inputSplits)` sends every row back to its owner;
 * 7. **unpermute**: the rows return to the tokens' original order.
 *
 * The routing is as skewed as the router makes it (a popular expert gets many rows, others none):
 * no padding to the largest count, which is what an even `allToAll` would need.
 *
 * @property expertsPerRank experts hosted by each rank; `worldSize * expertsPerRank` in all.
 * @property expert what expert `e` does to one token row (in place); the demo scales it by `e + 1`.
 */
public class MoeRouting(
    private val comm: Communicator,
    public val expertsPerRank: Int,
    private val expert: (expertId: Int, row: MemorySegment, hidden: Int) -> Unit = ::scaleByExpert,
) {
    /** Counts of the last [forward]: rows this rank sent to each rank, and received from each. */
    public var lastInputSplits: List<Int> = emptyList(); private set
    public var lastOutputSplits: List<Int> = emptyList(); private set

    /**
     * Routes [tokens] (`[tokens, hidden]`, Float32, host) to the experts [expertOf] names (one id
     * per token, in `0 until worldSize * expertsPerRank`), runs them, and returns the expert outputs
     * in the tokens' original order. Collective: every rank calls it (with its own tokens).
     */
    public suspend fun forward(tokens: Tensor, expertOf: IntArray): Tensor {
        val n = comm.worldSize
        val count = tokens.shape[0]
        val hidden = tokens.shape[1]
        require(expertOf.size == count) { "one expert id per token: ${expertOf.size} ids for $count tokens" }
        val experts = n * expertsPerRank
        require(expertOf.all { it in 0 until experts }) { "expert ids must be in 0 until $experts" }

        // 2. Permute: a stable sort of the tokens by destination rank.
        val order = (0 until count).sortedBy { expertOf[it] / expertsPerRank }
        val inputSplits = List(n) { r -> expertOf.count { it / expertsPerRank == r } }
        val rowBytes = hidden * 4L
        val permuted = Tensor.zeros(DType.Float32, count, hidden)
        val ids = Tensor.zeros(DType.Int32, count, 1)
        for ((i, t) in order.withIndex()) {
            MemorySegment.copy(tokens.segment, t * rowBytes, permuted.segment, i * rowBytes, rowBytes)
            ids.setLong(i.toLong(), expertOf[t].toLong())
        }

        // 3. Exchange the counts: outputSplits[j] = what rank j sends here.
        val counts = comm.allToAll(Tensor.of(LongArray(n) { inputSplits[it].toLong() }))
        val outputSplits = counts.toLongArray().map { it.toInt() }
        lastInputSplits = inputSplits
        lastOutputSplits = outputSplits

        // 4. Dispatch the rows and their expert ids.
        val received = comm.allToAllV(permuted, inputSplits, outputSplits)
        val receivedIds = comm.allToAllV(ids, inputSplits, outputSplits)

        // 5. This rank's experts, row by row.
        for (i in 0 until received.shape[0]) {
            expert(receivedIds.getLong(i.toLong()).toInt(), received.segment.asSlice(i * rowBytes, rowBytes), hidden)
        }

        // 6. Combine: every row goes back to the rank it came from, in the order it was sent.
        val back = comm.allToAllV(received, outputSplits, inputSplits)

        // 7. Unpermute.
        val out = Tensor.zeros(DType.Float32, count, hidden)
        for ((i, t) in order.withIndex()) MemorySegment.copy(back.segment, i * rowBytes, out.segment, t * rowBytes, rowBytes)
        listOf(permuted, ids, counts, received, receivedIds, back).forEach { it.close() }
        return out
    }

    public companion object {
        /** The demo's expert: expert `e` multiplies the row by `e + 1`. */
        @JvmStatic
        public fun scaleByExpert(expertId: Int, row: MemorySegment, hidden: Int) {
            for (h in 0 until hidden) {
                val at = h * 4L
                row.set(java.lang.foreign.ValueLayout.JAVA_FLOAT_UNALIGNED, at, row.get(java.lang.foreign.ValueLayout.JAVA_FLOAT_UNALIGNED, at) * (expertId + 1))
            }
        }
    }
}
