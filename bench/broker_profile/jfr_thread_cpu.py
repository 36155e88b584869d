"""CPU of a JVM's threads from a Flight Recorder recording (``jdk.ThreadCPULoad``:
user and system time of each thread, as a share of all the machine's cores,
one event per thread and period), and the JVM's and machine's (``jdk.CPULoad``)::

    python bench/broker_profile/jfr_thread_cpu.py broker.jfr
"""
import collections
import json
import subprocess
import sys


def main():
    out = subprocess.run(["jfr", "print", "--json", "--events", "jdk.ThreadCPULoad,jdk.CPULoad", sys.argv[1]],
                         capture_output=True, text=True, check=True).stdout
    events = json.loads(out)["recording"]["events"]
    user, system, periods = collections.Counter(), collections.Counter(), collections.Counter()
    jvm_user = jvm_system = machine = samples = 0
    for e in events:
        v = e["values"]
        if e["type"] == "jdk.CPULoad":
            jvm_user += v["jvmUser"]
            jvm_system += v["jvmSystem"]
            machine += v["machineTotal"]
            samples += 1
            continue
        t = f'{v["eventThread"]["javaName"]}#{v["eventThread"]["javaThreadId"]}'
        user[t] += v["user"]
        system[t] += v["system"]
        periods[t] += 1
    if samples:
        print(f"JVM over {samples} periods: user {100 * jvm_user / samples:.1f}% system "
              f"{100 * jvm_system / samples:.1f}% of the machine; machine {100 * machine / samples:.1f}%")
    total = collections.Counter({t: user[t] + system[t] for t in user})
    for t, _ in total.most_common(15):
        print(f"{t:70s} user {100 * user[t] / periods[t]:6.2f}% system {100 * system[t] / periods[t]:6.2f}% "
              f"(mean of {periods[t]} periods, share of all cores)")


if __name__ == "__main__":
    main()
