<?php
// SPDX-License-Identifier: Apache-2.0
// What the PHP examples share. They use the client package in clients/php
// (Chargeonce\Client: typed results, one exception class per error name,
// retries with the same ids), loaded with the package's Composer autoloader
// when `composer dump-autoload` has been run in clients/php, and otherwise
// with the few lines of PSR-4 below: a checkout runs them as it is, offline,
// with nothing but php-cli and php-curl. An application of your own requires
// the package through Composer instead (clients/php/README.md, "Install").

declare(strict_types=1);

use Chargeonce\Exception\ChargeonceException;

(static function (): void {
    $package = dirname(__DIR__, 2) . '/clients/php';
    if (is_file("$package/vendor/autoload.php")) {
        require "$package/vendor/autoload.php";
        return;
    }
    spl_autoload_register(static function (string $class) use ($package): void {
        $prefix = 'Chargeonce\\'; // composer.json: "Chargeonce\\": "src/"
        if (!str_starts_with($class, $prefix)) {
            return;
        }
        $file = "$package/src/" . strtr(substr($class, strlen($prefix)), '\\', '/') . '.php';
        if (is_file($file)) {
            require $file;
        }
    });
})();

/** The server's URL, CHARGEONCE_URL; the examples' token is CHARGEONCE_TOKEN. */
function chargeonce_url(): string
{
    return getenv('CHARGEONCE_URL') ?: 'http://127.0.0.1:8080';
}

/** An error as the API names it: {"error": NAME, "message": …}. */
function error_fields(ChargeonceException $e): array
{
    return ['error' => $e->error, 'message' => $e->getMessage()];
}

/** One JSON line of output. */
function say(array $fields): void
{
    echo json_encode($fields), "\n";
}
