import Foundation

/// One measured quantity, for the server and for the baseline in the same run.
struct Figure {
    var name: String
    var unit: String
    var server: Double
    var baseline: Double?
    /// Ratio server ÷ baseline; whether above 1 is good depends on the figure (`higherIsBetter`).
    var higherIsBetter: Bool
    /// Each round's own ratio when the figure stands for several rounds (`--rounds`), in order.
    var roundRatios: [Double] = []

    /// Server ÷ baseline; over several rounds, the median of the rounds' own ratios: each round's
    /// two runs are seconds apart, so a drift of the host's speed across the rounds stays out of it.
    var ratio: Double? {
        if !roundRatios.isEmpty { return Stats.median(roundRatios) }
        guard let baseline, baseline != 0, server.isFinite, baseline.isFinite else { return nil }
        return server / baseline
    }

    /// " (rounds 0.63, 0.70, 0.68)" after a ratio that is a median of rounds; empty otherwise.
    var roundsText: String {
        roundRatios.isEmpty ? "" : " (rounds " + roundRatios.map { String(format: "%.2f", $0) }.joined(separator: ", ") + ")"
    }
}

/// What one scenario measured, verified and saw of the machine.
struct ScenarioResult {
    var name: String
    var parameters: String
    var figures: [Figure] = []
    /// Counts the generator checked (each delivery, ack, welcome…), per target.
    var verified: [String: Int] = [:]
    var loadBefore = ""
    var loadAfter = ""
    /// Per CPU, the share of the scenario's wall clock the host stole (`Machine.stolenShares`).
    var stolen: [Double?] = []
    /// Generator CPU seconds ÷ target CPU seconds over the measured phases, per target.
    var generatorShare: [String: Double] = [:]
    var notes: [String] = []
    var error: String?

    /// Several rounds of one scenario (`--rounds`; each round runs the server, then the baseline)
    /// as one result: each figure the median of the rounds that did not fail, for the server and
    /// for the baseline, its ratio the median of the rounds' ratios (`Figure.ratio`). Counts
    /// verified are summed, generator shares are medians, the CPU stolen is the most any round saw,
    /// notes keep their round's number, and a failed round is named in a note. One round is
    /// returned as it is; `rounds` must not be empty.
    static func combining(_ rounds: [ScenarioResult]) -> ScenarioResult {
        precondition(!rounds.isEmpty, "no rounds to combine")
        let first = rounds[0]
        guard rounds.count > 1 else { return first }
        let good = rounds.enumerated().filter { $0.element.error == nil }
        var combined = ScenarioResult(name: first.name, parameters: first.parameters + "; median of \(good.count) of \(rounds.count) rounds")
        combined.loadBefore = first.loadBefore
        combined.loadAfter = rounds[rounds.count - 1].loadAfter
        let cpus = rounds.map(\.stolen.count).max() ?? 0
        combined.stolen = (0..<cpus).map { cpu in rounds.compactMap { cpu < $0.stolen.count ? $0.stolen[cpu] : nil }.max() }
        for (index, round) in rounds.enumerated() {
            if let error = round.error { combined.notes.append("round \(index + 1) failed: \(error)") }
        }
        guard let reference = good.first?.element else {
            combined.error = first.error
            return combined
        }
        for figure in reference.figures {
            let matching = good.compactMap { $0.element.figures.first { $0.name == figure.name } }
            var median = figure
            median.server = Stats.median(matching.map(\.server))
            median.baseline = figure.baseline == nil ? nil : Stats.median(matching.compactMap(\.baseline))
            median.roundRatios = matching.compactMap(\.ratio)
            combined.figures.append(median)
        }
        for (_, round) in good {
            combined.verified.merge(round.verified, uniquingKeysWith: +)
        }
        for key in Set(good.flatMap { $0.element.generatorShare.keys }) {
            combined.generatorShare[key] = Stats.median(good.compactMap { $0.element.generatorShare[key] })
        }
        for (index, round) in good {
            combined.notes += round.notes.map { "round \(index + 1): \($0)" }
        }
        return combined
    }

    /// JSON has no NaN: a figure that could not be measured is null.
    private static func number(_ value: Double) -> Any { value.isFinite ? value : NSNull() }

    var json: [String: Any] {
        var object: [String: Any] = [
            "scenario": name, "parameters": parameters, "verified": verified, "load_before": loadBefore,
            "load_after": loadAfter, "cpu_stolen": stolen.map { $0.map(Self.number) ?? NSNull() },
            "generator_cpu_share": generatorShare.mapValues(Self.number), "notes": notes,
            "figures": figures.map { figure -> [String: Any] in
                var entry: [String: Any] = ["name": figure.name, "unit": figure.unit, "server": Self.number(figure.server),
                                            "higher_is_better": figure.higherIsBetter]
                if let baseline = figure.baseline { entry["baseline"] = Self.number(baseline) }
                if let ratio = figure.ratio { entry["ratio"] = Self.number(ratio) }
                if !figure.roundRatios.isEmpty { entry["round_ratios"] = figure.roundRatios.map(Self.number) }
                return entry
            },
        ]
        if let error { object["error"] = error }
        return object
    }

    /// "CPU stolen by the host: 0 3 %, 1 12 %", or nothing where /proc/stat gave nothing.
    var stolenText: String {
        let shares = stolen.enumerated().compactMap { cpu, share in share.map { String(format: "%d %.0f %%", cpu, $0 * 100) } }
        return shares.isEmpty ? "" : "CPU stolen by the host: " + shares.joined(separator: ", ")
    }

    /// "0.6 0.7 0.5 → 0.9 0.7 0.5": the load before and after, and what the host stole when that is known.
    var loadText: String {
        "\(loadBefore) → \(loadAfter)" + (stolenText.isEmpty ? "" : "; \(stolenText)")
    }

    /// The scenario's block for the terminal.
    var text: String {
        var lines = ["\(name) (\(parameters)); load \(loadText)"]
        if let error { lines.append("  FAILED: \(error)") }
        for figure in figures {
            var line = "  \(figure.name): server \(Self.format(figure.server)) \(figure.unit)"
            if let baseline = figure.baseline { line += " · baseline \(Self.format(baseline)) \(figure.unit)" }
            if let ratio = figure.ratio { line += " · ratio \(String(format: "%.2f", ratio))×\(figure.roundsText)" }
            lines.append(line)
        }
        if !verified.isEmpty {
            lines.append("  verified: " + verified.sorted { $0.key < $1.key }.map { "\($0.key) \($0.value)" }.joined(separator: ", "))
        }
        if !generatorShare.isEmpty {
            lines.append("  generator CPU ÷ target CPU: " + generatorShare.sorted { $0.key < $1.key }
                .map { "\($0.key) \(String(format: "%.2f", $0.value))" }.joined(separator: ", "))
        }
        for note in notes { lines.append("  note: \(note)") }
        return lines.joined(separator: "\n")
    }

    static func format(_ value: Double) -> String {
        guard value.isFinite else { return "n/a" }
        if abs(value) >= 1_000 { return String(format: "%.0f", value) }
        if abs(value) >= 10 { return String(format: "%.1f", value) }
        return String(format: "%.3f", value)
    }
}

/// The summary written at the end of a run: JSON for tools, Markdown for docs/benchmarks.md.
struct SuiteReport {
    var started: Date
    var header: [String]
    var results: [ScenarioResult]

    var json: [String: Any] {
        ["started": ISO8601DateFormatter().string(from: started), "setup": header, "scenarios": results.map(\.json)]
    }

    var markdown: String {
        var lines = ["# calling-bench, \(ISO8601DateFormatter().string(from: started))", ""]
        lines += header.map { "- \($0)" }
        lines += ["", "| scenario | figure | server | baseline | ratio | load (1/5/15 min); CPU stolen | verified |", "| --- | --- | --- | --- | --- | --- | --- |"]
        for result in results {
            let verified = result.verified.sorted { $0.key < $1.key }.map { "\($0.key) \($0.value)" }.joined(separator: ", ")
            if let error = result.error {
                lines.append("| \(result.name) | **failed**: \(error) | | | | \(result.loadBefore) | |")
            }
            for figure in result.figures {
                let baseline = figure.baseline.map { ScenarioResult.format($0) } ?? "—"
                let ratio = figure.ratio.map { String(format: "%.2f×", $0) + figure.roundsText } ?? "—"
                lines.append("| \(result.name) (\(result.parameters)) | \(figure.name) [\(figure.unit)] | \(ScenarioResult.format(figure.server)) | \(baseline) | \(ratio) | \(result.loadText) | \(verified) |")
            }
        }
        return lines.joined(separator: "\n") + "\n"
    }
}

enum Stats {
    static func percentile(_ sorted: [Double], _ p: Double) -> Double {
        guard !sorted.isEmpty else { return .nan }
        return sorted[min(sorted.count - 1, Int(Double(sorted.count) * p))]
    }

    /// The middle value (the mean of the two middle ones for an even count); NaN for none.
    static func median(_ values: [Double]) -> Double {
        let sorted = values.sorted()
        guard !sorted.isEmpty else { return .nan }
        let middle = sorted.count / 2
        return sorted.count % 2 == 1 ? sorted[middle] : (sorted[middle - 1] + sorted[middle]) / 2
    }
}
