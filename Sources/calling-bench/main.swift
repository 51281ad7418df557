import CallingBench
import Foundation

// `calling-bench SCENARIO [flags]`; `calling-server bench …` runs this binary too.
exit(BenchCommand.run(arguments: CommandLine.arguments))
