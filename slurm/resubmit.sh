#!/usr/bin/env bash
# resubmit.sh - a job whose batch host died, submitted again within seconds (sourced by
# slurm/train.sh, which saves the submission, and slurm/agent.sh, which replays it; it runs
# nothing). Slurm cannot do this quickly for the job's owner: the owner may not release the
# batch host from the job (`scontrol update NodeList=` refuses it), a requeue waits in
# COMPLETING until Slurm marks the dead node DOWN (SlurmdTimeout, 300 s by default), and a
# requeued job is eligible only cred_expire + 1 s (121 s) later. A new job can start at once.
#   - submit_capture (train.sh, at its start): RUN/.submit/ (0700) gets `job` (slurmctld's
#     record of the job: time limit, output paths, working directory, exclusions, features...),
#     `env` (the batch script's environment as it began, NUL-separated: the submission's
#     environment plus Slurm's SLURM_* variables, which give the node and task counts,
#     partition, account and job name) and `script` (the batch script as submitted);
#   - resubmit_job (a batch-host watcher, slurm/agent.sh): the same script with the same
#     options and environment (`env -i`, Slurm's output variables left out), from the same
#     submit directory, the dead node excluded; the dead batch host's place is taken by a spare
#     (one node and one spare fewer, as when a training node dies), so the new job fits on the
#     old job's live nodes (FTRAIN_RESUBMIT_SAME_SIZE=1: the same node count and spares);
#     a job without spares keeps its size (it needs one free node besides the live ones).
# The new job gets FTRAIN_RESUBMITTED_FROM=<old job> (train.sh records its start as a
# requeue and resumes from the newest complete checkpoint), FTRAIN_RESUBMITS (resubmissions
# so far; none after FTRAIN_MAX_RESUBMITS, default 3: a crash loop cannot flood the queue) and
# FTRAIN_RESUBMIT_EXCLUDED (the nodes this excluded: the next resubmission excludes only the
# node that died then, so a node that came back is used again).
# Replayed: --nodes, --ntasks-per-node (or --ntasks), --cpus-per-task, --partition, --account,
# --qos, --job-name, --time, --chdir, --output/--error (the job id in their names back to %j),
# --exclude, --constraint, --reservation, --mem, --gres, --exclusive, --mail-user/--mail-type,
# --no-kill (spares) and the #SBATCH lines of the script. Not replayed: --nodelist (it may
# name the dead node), --dependency and --begin (met: the job ran), --comment (scontrol's
# one-line record cuts it at a space); jobs waiting on the old job are pointed at the new one.
# Uses from the caller: log.

# submit_capture DIR SCRIPT: best effort (a job without it is not resubmitted: Slurm's
# requeue after SlurmdTimeout remains).
submit_capture() {
  local dir="$1" tmp
  [[ -n "${SLURM_JOB_ID:-}" && -r "$2" ]] || return 0
  tmp="${dir}/.tmp.${SLURM_JOB_ID}.$$"
  (
    umask 077
    mkdir -p "${dir}" &&
      scontrol -o show job "${SLURM_JOB_ID}" >"${tmp}.job" &&
      cp "$2" "${tmp}.script" && env -0 >"${tmp}.env" &&
      mv -f "${tmp}.job" "${dir}/job" && mv -f "${tmp}.script" "${dir}/script" &&
      mv -f "${tmp}.env" "${dir}/env"
  ) 2>/dev/null || { rm -f "${tmp}".*; return 1; }
}

# Loads DIR's capture: sub_job (scontrol's line), sub_env (NAME=VALUE...), sub_var[NAME].
declare -A sub_var=()
sub_job="" sub_env=()
submit_load() {  # submit_load DIR
  local kv
  sub_job="$(cat "$1/job" 2>/dev/null)" || return 1
  mapfile -d '' -t sub_env <"$1/env" || return 1
  [[ -r "$1/script" && ${#sub_env[@]} -gt 0 ]] || return 1
  sub_var=()
  for kv in "${sub_env[@]}"; do sub_var["${kv%%=*}"]="${kv#*=}"; done
}

# A field of the captured scontrol record, empty when unset ("(null)", "N/A", "0").
sub_field() {  # sub_field NAME
  [[ "${sub_job}" =~ (^|[[:space:]])$1=([^[:space:]]*) ]] || return 0
  case "${BASH_REMATCH[2]}" in "(null)" | N/A | None | "") ;; *) echo "${BASH_REMATCH[2]}" ;; esac
}

# An output path of the old job with its job id put back as %j (a fixed name stays: the new
# job appends to it, train.sh's --open-mode=append).
output_pattern() {  # output_pattern PATH JOBID
  local dir="${1%/*}" base="${1##*/}"
  [[ "$1" == */* ]] || dir=""
  base="$(sed -E "s/(^|[^0-9])$2([^0-9]|\$)/\\1%j\\2/g" <<<"${base}")"
  echo "${dir:+${dir}/}${base}"
}

# The sbatch options of the new job (sub_opts), from the capture; DEAD is excluded.
sub_opts=()
submit_options() {  # submit_options DEAD OLD_JOB
  local v exc nodes spares out err
  nodes="${sub_var[SLURM_JOB_NUM_NODES]:-${sub_var[SLURM_NNODES]:-}}"
  spares="${sub_var[FTRAIN_SPARE_NODES]:-0}"
  [[ "${nodes}" =~ ^[0-9]+$ ]] || return 1
  if [[ "${spares}" =~ ^[1-9][0-9]*$ && "${FTRAIN_RESUBMIT_SAME_SIZE:-0}" != "1" ]]; then
    nodes=$((nodes - 1)) spares=$((spares - 1))
  fi
  sub_opts=(--parsable --nodes="${nodes}")
  if [[ -n "${sub_var[SLURM_NTASKS_PER_NODE]:-}" ]]; then
    sub_opts+=(--ntasks-per-node="${sub_var[SLURM_NTASKS_PER_NODE]}")
  elif [[ -n "${sub_var[SLURM_NTASKS]:-}" ]]; then
    sub_opts+=(--ntasks="${sub_var[SLURM_NTASKS]}")
  fi
  [[ -z "${sub_var[SLURM_CPUS_PER_TASK]:-}" ]] || sub_opts+=(--cpus-per-task="${sub_var[SLURM_CPUS_PER_TASK]}")
  [[ -z "${sub_var[SLURM_JOB_NAME]:-}" ]] || sub_opts+=(--job-name="${sub_var[SLURM_JOB_NAME]}")
  v="$(sub_field Partition)" && [[ -z "${v}" ]] || sub_opts+=(--partition="${v}")
  v="$(sub_field Account)" && [[ -z "${v}" ]] || sub_opts+=(--account="${v}")
  v="$(sub_field QOS)" && [[ -z "${v}" ]] || sub_opts+=(--qos="${v}")
  v="$(sub_field TimeLimit)" && [[ -z "${v}" || "${v}" == UNLIMITED || "${v}" == Partition_Limit ]] ||
    sub_opts+=(--time="${v}")
  v="$(sub_field WorkDir)" && [[ -z "${v}" ]] || sub_opts+=(--chdir="${v}")
  out="$(sub_field StdOut)" err="$(sub_field StdErr)"
  [[ -z "${out}" ]] || sub_opts+=(--output="$(output_pattern "${out}" "$2")")
  [[ -z "${err}" || "${err}" == "${out}" ]] || sub_opts+=(--error="$(output_pattern "${err}" "$2")")
  v="$(sub_field Features)" && [[ -z "${v}" ]] || sub_opts+=(--constraint="${v}")
  v="$(sub_field Reservation)" && [[ -z "${v}" ]] || sub_opts+=(--reservation="${v}")
  v="$(sub_field MinMemoryNode)" && [[ -z "${v}" || "${v}" == 0 ]] || sub_opts+=(--mem="${v}")
  v="$(sub_field TresPerNode)" && [[ -z "${v}" ]] || sub_opts+=(--gres="$(sed -E 's#gres[:/]##g' <<<"${v}")")
  [[ "$(sub_field OverSubscribe)" != NO ]] || sub_opts+=(--exclusive)
  v="$(sub_field MailUser)" && [[ -z "${v}" ]] || sub_opts+=(--mail-user="${v}")
  v="$(sub_field MailType)" && [[ -z "${v}" || "${v}" == NONE ]] || sub_opts+=(--mail-type="${v}")
  # The user's exclusions stay; the nodes an earlier resubmission excluded go (back if alive).
  exc="$(exclusions "$(sub_field ExcNodeList)" "${sub_var[FTRAIN_RESUBMIT_EXCLUDED]:-}" "$1")"
  sub_opts+=(--exclude="${exc}")
  ((spares == 0)) || sub_opts+=(--no-kill)
  sub_spares="${spares}"
}

# EXC minus DROP plus ADD (Slurm host lists), comma-separated.
exclusions() {  # exclusions EXC DROP ADD
  local n out=() drop
  drop=" $(scontrol show hostnames "$2" 2>/dev/null | paste -sd' ') "
  while read -r n; do
    [[ -n "${n}" && "${drop}" != *" ${n} "* && "${n}" != "$3" ]] && out+=("${n}")
  done < <(scontrol show hostnames "$1" 2>/dev/null)
  out+=("$3")
  (IFS=,; echo "${out[*]}")
}

# The environment of the new job: the captured one without Slurm's output variables (SLURM_*
# but SLURM_CONF, SLURMD_*, ENVIRONMENT=BATCH) and ftrain's resubmission variables, then those
# set anew.
sub_spares=0
submit_environment() {  # submit_environment DEAD OLD_JOB -> sub_newenv
  local kv name
  sub_newenv=()
  for kv in "${sub_env[@]}"; do
    name="${kv%%=*}"
    case "${name}" in
      SLURM_CONF) ;;
      SLURM_* | SLURMD_* | ENVIRONMENT | FTRAIN_RESUBMIT* | FTRAIN_SPARE_NODE*) continue ;;
    esac
    sub_newenv+=("${kv}")
  done
  [[ -n "${sub_var[FTRAIN_HOME]:-}" ]] || sub_newenv+=("FTRAIN_HOME=${FTRAIN_HOME}")
  [[ -z "${sub_var[FTRAIN_SPARE_NODES]:-}" ]] || sub_newenv+=("FTRAIN_SPARE_NODES=${sub_spares}")
  if [[ -n "${sub_var[FTRAIN_SPARE_NODELIST]:-}" && "${FTRAIN_RESUBMIT_SAME_SIZE:-0}" == "1" ]]; then
    sub_newenv+=("FTRAIN_SPARE_NODELIST=${sub_var[FTRAIN_SPARE_NODELIST]}")
  fi
  local excluded="$1"
  sub_newenv+=("FTRAIN_RESUBMITTED_FROM=$2" "FTRAIN_RESUBMITS=$((${sub_var[FTRAIN_RESUBMITS]:-0} + 1))"
    "FTRAIN_RESUBMIT_EXCLUDED=${excluded}")
  [[ -z "${sub_var[FTRAIN_RESUBMIT_SAME_SIZE]:-}" ]] || sub_newenv+=("FTRAIN_RESUBMIT_SAME_SIZE=${sub_var[FTRAIN_RESUBMIT_SAME_SIZE]}")
}

# Submits the job again (see the top): sets sub_new_job (and sub_opts, sub_job); fails with a
# line on stderr.
sub_new_job=""
# shellcheck disable=SC2034  # sub_new_job: read by agent.sh
resubmit_job() {  # resubmit_job DIR DEAD OLD_JOB
  local out rc=0 submit_dir
  submit_load "$1" || { echo "no complete submission in $1" >&2; return 1; }
  [[ "$(sub_field JobId)" == "$3" ]] || { echo "$1 holds job $(sub_field JobId)'s submission, not job $3's" >&2; return 1; }
  submit_options "$2" "$3" || { echo "$1/env has no node count (SLURM_JOB_NUM_NODES)" >&2; return 1; }
  submit_environment "$2" "$3"
  submit_dir="${sub_var[SLURM_SUBMIT_DIR]:-$(sub_field WorkDir)}"
  out="$(cd "${submit_dir:-/}" && env -i "${sub_newenv[@]}" timeout 60 sbatch "${sub_opts[@]}" "$1/script" 2>&1)" || rc=$?
  if ((rc != 0)) || ! [[ "${out%%;*}" =~ ^[0-9]+$ ]]; then
    echo "sbatch ${sub_opts[*]} failed (exit ${rc}): ${out}" >&2
    return 1
  fi
  sub_new_job="${out%%;*}"
}

# Pending jobs of this user that wait on OLD (--dependency) wait on NEW instead: a cancelled
# job never satisfies afterok, and afterany would fire now. Best effort, one line each.
repoint_dependents() {  # repoint_dependents OLD NEW
  local id dep
  while read -r id dep; do
    [[ "${dep}" =~ (^|[^0-9])$1([^0-9]|$) ]] || continue
    dep="$(sed -E -e 's/\([^)]*\)//g' -e "s/(^|[^0-9])$1([^0-9]|\$)/\\1$2\\2/g" <<<"${dep}")"
    if timeout 10 scontrol update JobId="${id}" Dependency="${dep}" >/dev/null 2>&1; then
      log "job ${id} now waits on job $2 (Dependency=${dep})"
    else
      log "WARNING: could not point job ${id}'s dependency at job $2; it still names job $1"
    fi
  done < <(squeue -h -u "$(id -un)" -t PD -o '%i %E' 2>/dev/null)
}
