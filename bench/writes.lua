-- The load of bench/writes.py: each request renames a user (PUT /api/auth/me, one unit of work),
-- with the next of the bearer tokens given (one user each), without pauses.
-- wrk ... -s bench/writes.lua <base url> -- <token,token,...>

local tokens = {}
local counter = 0

function init(args)
   for token in string.gmatch(args[1], "[^,]+") do
      table.insert(tokens, token)
   end
end

function request()
   counter = counter + 1
   local headers = {
      ["Authorization"] = "Bearer " .. tokens[counter % #tokens + 1],
      ["Content-Type"] = "application/json",
   }
   return wrk.format("PUT", "/api/auth/me", headers, '{"name":"Writer ' .. counter .. '"}')
end
