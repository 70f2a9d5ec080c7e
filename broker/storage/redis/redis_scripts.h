/*
 * Internal: the Lua scripts of the redis backend (redis.c).  Redis runs
 * a script as one step, so each rule is checked in the same step as the
 * write it guards.  ARGV[1] is always the prefix P.  Every write
 * publishes the keys it touched on P/inval (one message, keys
 * separated by newlines; "*" for "everything"), before it writes: a
 * script that fails midway keeps what it wrote, so a PUBLISH the
 * server refuses (an ACL without the channel) must fail first.
 * Subscribers see the message only after the script ends.
 */
#ifndef TSEC_STORAGE_REDIS_SCRIPTS_H
#define TSEC_STORAGE_REDIS_SCRIPTS_H

/* Shared: may a value stand at key k? (no value above, no folder at) */
#define TSEC__LUA_MAY_STAND \
	"local function may_stand(P, k)\n" \
	"  local pos = 1\n" \
	"  while true do\n" \
	"    local s = string.find(k, '/', pos, true)\n" \
	"    if not s then break end\n" \
	"    if redis.call('EXISTS', P..'/k/'..string.sub(k, 1, s - 1)) == 1 then return false end\n" \
	"    pos = s + 1\n" \
	"  end\n" \
	"  return #redis.call('ZRANGEBYLEX', P..'/i', '['..k..'/', '('..k..'0', 'LIMIT', 0, 1) == 0\n" \
	"end\n"

/* Is the lock ARGV[n] held by token ARGV[n+1] (with fence ARGV[n+2] if
 * given)?  'OK', 'ENOTOWNER' or 'ENOENT'. */
#define TSEC__LUA_OWNED \
	"local function owned(P, name, token, fence)\n" \
	"  local f = P..'/f/'..name\n" \
	"  local cur = redis.call('GET', P..'/l/'..name)\n" \
	"  if cur == token then\n" \
	"    if fence and redis.call('HGET', f, 'fence') ~= fence then return 'ENOTOWNER' end\n" \
	"    return 'OK'\n" \
	"  end\n" \
	"  if cur or redis.call('HGET', f, 'holder') == token then return 'ENOTOWNER' end\n" \
	"  return 'ENOENT'\n" \
	"end\n"

/* put_many: ARGV P, n, lock name or '', token, fence, the guard's key
 * or '', 'A' (the guard's key holds nothing) or 'V' (it holds exactly
 * the stored bytes that follow), those bytes, then n key/value. */
static const char tsec__lua_put[] =
	TSEC__LUA_MAY_STAND TSEC__LUA_OWNED
	"local P, n = ARGV[1], tonumber(ARGV[2])\n"
	"if ARGV[3] ~= '' then\n"
	"  local o = owned(P, ARGV[3], ARGV[4], ARGV[5])\n"
	"  if o ~= 'OK' then return o end\n"
	"end\n"
	"if ARGV[6] ~= '' then\n"
	"  local cur = redis.call('GET', P..'/k/'..ARGV[6])\n"
	"  if ARGV[7] == 'A' then\n"
	"    if cur then return 'ECHANGED' end\n"
	"  elseif cur ~= ARGV[8] then return 'ECHANGED' end\n"
	"end\n"
	"local keys = {}\n"
	"for i = 0, n - 1 do\n"
	"  local k = ARGV[9 + 2 * i]\n"
	"  if not may_stand(P, k) then return 'EEXIST' end\n"
	"  keys[#keys + 1] = k\n"
	"end\n"
	"redis.call('PUBLISH', P..'/inval', table.concat(keys, '\\n'))\n"
	"for i = 0, n - 1 do\n"
	"  redis.call('SET', P..'/k/'..ARGV[9 + 2 * i], ARGV[10 + 2 * i])\n"
	"  redis.call('ZADD', P..'/i', 0, ARGV[9 + 2 * i])\n"
	"end\n"
	"return 'OK'\n";

/* A fenced delete or move: ARGV[4..6] lock name or '', token, fence.
 * The lock's verdict comes back as 'L' then owned()'s answer. */
#define TSEC__LUA_FENCED \
	"if ARGV[4] ~= '' then\n" \
	"  local o = owned(ARGV[1], ARGV[4], ARGV[5], ARGV[6])\n" \
	"  if o ~= 'OK' then return 'L'..o end\n" \
	"end\n"

/* delete: ARGV P, key, recursive ('1' or '0'), then the fence.  Count
 * deleted, or an error name. */
static const char tsec__lua_del[] =
	TSEC__LUA_OWNED TSEC__LUA_FENCED
	"local P, k, rec = ARGV[1], ARGV[2], ARGV[3] == '1'\n"
	"local n = redis.call('EXISTS', P..'/k/'..k)\n"
	"if not rec then\n"
	"  if n == 1 then\n"
	"    redis.call('PUBLISH', P..'/inval', k)\n"
	"    redis.call('DEL', P..'/k/'..k)\n"
	"    redis.call('ZREM', P..'/i', k)\n"
	"    return 1\n"
	"  end\n"
	"  if #redis.call('ZRANGEBYLEX', P..'/i', '['..k..'/', '('..k..'0', 'LIMIT', 0, 1) > 0 then return 'EINVAL' end\n"
	"  return 'ENOENT'\n"
	"end\n"
	"local below = redis.call('ZRANGEBYLEX', P..'/i', '['..k..'/', '('..k..'0')\n"
	"if n + #below == 0 then return 0 end\n"
	"if #below > 1000 then redis.call('PUBLISH', P..'/inval', '*')\n"
	"else redis.call('PUBLISH', P..'/inval', table.concat(below, '\\n')..'\\n'..k) end\n"
	"if n == 1 then redis.call('DEL', P..'/k/'..k) redis.call('ZREM', P..'/i', k) end\n"
	"for _, b in ipairs(below) do\n"
	"  redis.call('DEL', P..'/k/'..b)\n"
	"  redis.call('ZREM', P..'/i', b)\n"
	"end\n"
	"return n + #below\n";

/* move: ARGV P, src, dst, the fence (3), the envelope read from src,
 * the new one. */
static const char tsec__lua_move[] =
	TSEC__LUA_MAY_STAND TSEC__LUA_OWNED
	TSEC__LUA_FENCED
	"local P, s, d = ARGV[1], ARGV[2], ARGV[3]\n"
	"local cur = redis.call('GET', P..'/k/'..s)\n"
	"if not cur then\n"
	"  if #redis.call('ZRANGEBYLEX', P..'/i', '['..s..'/', '('..s..'0', 'LIMIT', 0, 1) > 0 then return 'EINVAL' end\n"
	"  return 'ENOENT'\n"
	"end\n"
	"if cur ~= ARGV[7] then return 'RETRY' end\n"
	"if redis.call('EXISTS', P..'/k/'..d) == 1 or not may_stand(P, d) then return 'EEXIST' end\n"
	"redis.call('PUBLISH', P..'/inval', s..'\\n'..d)\n"
	"redis.call('SET', P..'/k/'..d, ARGV[8])\n"
	"redis.call('ZADD', P..'/i', 0, d)\n"
	"redis.call('DEL', P..'/k/'..s)\n"
	"redis.call('ZREM', P..'/i', s)\n"
	"return 'OK'\n";

/*
 * acquire: ARGV P, name, token, ttl_ms, waiter (16 bytes, or empty: a
 * try that does not wait).  The fence, or false if held or waited for.
 * The caller chooses the token, so a resent acquire whose first answer
 * was lost finds its own grant and gets the same fence back.
 * The fence is max(last + 1, the server's clock in microseconds), so it
 * never goes back when the counter is lost (a restart without
 * persistence, an eviction) while the server's clock does not.  Lua's
 * numbers are doubles, exact for integers below 2^53 (year 2255 in
 * microseconds); '%.0f' writes them without an exponent.
 *
 * Waiters are served in the order they came: P/q/<name> ranks them (by
 * a counter in the fence's hash), P/qs/<name> says when each last asked
 * (the server's clock).  A free lock goes only to the head of the queue,
 * or to anyone when nobody waits; a waiter that has not asked for
 * TSEC__RD_WAITER_STALE_MS (its wait ended, its broker died or paused)
 * is dropped from the head.  Both keys end on their own once nobody asks.
 */
#define TSEC__RD_WAITER_STALE_MS "1000"
static const char tsec__lua_acquire[] =
	"local P, name, token, waiter = ARGV[1], ARGV[2], ARGV[3], ARGV[5]\n"
	"local q, qs = P..'/q/'..name, P..'/qs/'..name\n"
	"local cur = redis.call('GET', P..'/l/'..name)\n"
	"if cur == token then return tonumber(redis.call('HGET', P..'/f/'..name, 'fence')) end\n"
	"local t = redis.call('TIME')\n"
	"local ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n"
	"local head\n"
	"while true do\n"
	"  head = redis.call('ZRANGE', q, 0, 0)[1]\n"
	"  if not head then break end\n"
	"  if ms - tonumber(redis.call('HGET', qs, head) or '0') <= " TSEC__RD_WAITER_STALE_MS " then break end\n"
	"  redis.call('ZREM', q, head)\n"
	"  redis.call('HDEL', qs, head)\n"
	"end\n"
	"if cur or (head and head ~= waiter) then\n"
	"  if waiter ~= '' then\n"
	"    if not redis.call('ZSCORE', q, waiter) then\n"
	"      redis.call('ZADD', q, redis.call('HINCRBY', P..'/f/'..name, 'queued', 1), waiter)\n"
	"    end\n"
	"    redis.call('HSET', qs, waiter, ms)\n"
	"    redis.call('PEXPIRE', q, 4 * " TSEC__RD_WAITER_STALE_MS ")\n"
	"    redis.call('PEXPIRE', qs, 4 * " TSEC__RD_WAITER_STALE_MS ")\n"
	"  end\n"
	"  return false\n"
	"end\n"
	"if head then\n"
	"  redis.call('ZREM', q, head)\n"
	"  redis.call('HDEL', qs, head)\n"
	"end\n"
	"redis.call('SET', P..'/l/'..name, token, 'PX', ARGV[4])\n"
	"local now = tonumber(t[1]) * 1000000 + tonumber(t[2])\n"
	"local last = redis.call('HGET', P..'/f/'..name, 'fence')\n"
	"local f = (last and tonumber(last) or 0) + 1\n"
	"if f < now then f = now end\n"
	"redis.call('HSET', P..'/f/'..name, 'fence', string.format('%.0f', f), 'holder', token)\n"
	"return f\n";

/* unwait: ARGV P, name, waiter: a wait that ended unserved leaves the queue. */
static const char tsec__lua_unwait[] =
	"redis.call('ZREM', ARGV[1]..'/q/'..ARGV[2], ARGV[3])\n"
	"redis.call('HDEL', ARGV[1]..'/qs/'..ARGV[2], ARGV[3])\n"
	"return 'OK'\n";

/* renew: ARGV P, name, token, ttl_ms. */
static const char tsec__lua_renew[] =
	TSEC__LUA_OWNED
	"local o = owned(ARGV[1], ARGV[2], ARGV[3], nil)\n"
	"if o == 'OK' then redis.call('PEXPIRE', ARGV[1]..'/l/'..ARGV[2], ARGV[4]) end\n"
	"return o\n";

/* release: ARGV P, name, token. */
static const char tsec__lua_release[] =
	TSEC__LUA_OWNED
	"local o = owned(ARGV[1], ARGV[2], ARGV[3], nil)\n"
	"if o == 'OK' then\n"
	"  redis.call('DEL', ARGV[1]..'/l/'..ARGV[2])\n"
	"  redis.call('HDEL', ARGV[1]..'/f/'..ARGV[2], 'holder')\n"
	"end\n"
	"return o\n";

#endif
