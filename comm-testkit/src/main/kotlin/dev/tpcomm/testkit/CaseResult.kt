package dev.tpcomm.testkit

/**
 * The outcome of one [ConformanceCase] on one rank.
 *
 * @property case the case's name.
 * @property rank the rank that ran it.
 * @property worldSize the size of the world it ran in.
 * @property status passed, failed or skipped.
 * @property message why it failed or was skipped (null when it passed).
 * @property durationMillis wall time the case took on this rank.
 */
public data class CaseResult(
    public val case: String,
    public val rank: Int,
    public val worldSize: Int,
    public val status: Status,
    public val message: String? = null,
    public val durationMillis: Long = 0,
) {
    /** Outcome of a case. */
    public enum class Status {
        /** Every check held on this rank. */
        Passed,

        /** A check failed, the case threw, or it hung past its guard timeout. */
        Failed,

        /** The case does not apply (world too small, capability missing, no scratch communicator). */
        Skipped,
    }

    /** True when the case passed or was skipped. */
    public val ok: Boolean get() = status != Status.Failed
}
